//! PTX text, as far as the simulator needs it: the visible entries and the layout of their
//! parameters (`cuKernelGetParamInfo` and the reading of `kernelParams` at launch depend on
//! it). Nothing is compiled: the bodies are skipped, and the simulator runs known kernels by
//! name (see `kernels`).

/// One kernel parameter: where it lies in the parameter buffer, and how many bytes it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    pub offset: usize,
    pub size: usize,
}

/// One `.visible .entry`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub params: Vec<Param>,
}

impl Entry {
    /// Bytes of the parameter buffer (end of the last parameter).
    pub fn param_bytes(&self) -> usize {
        self.params.last().map_or(0, |p| p.offset + p.size)
    }

    /// The parameter sizes, to recognise a known kernel's signature.
    pub fn sizes(&self) -> Vec<usize> {
        self.params.iter().map(|p| p.size).collect()
    }
}

/// Removes `//` and `/* */` comments (string literals do not occur in PTX directives the
/// simulator reads).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            out.push(' ');
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Bytes of a scalar PTX type, `None` for anything else.
fn type_size(name: &str) -> Option<usize> {
    Some(match name {
        "u8" | "s8" | "b8" => 1,
        "u16" | "s16" | "b16" | "f16" => 2,
        "u32" | "s32" | "b32" | "f32" => 4,
        "u64" | "s64" | "b64" | "f64" => 8,
        _ => return None,
    })
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$' || c == '%')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// `(size, alignment)` of one parameter declaration, e.g. `.param .u64 p`,
/// `.param .align 8 .b8 p[16]`, `.param .u64 .ptr .global .align 4 p`.
fn parse_param(text: &str) -> Option<(usize, usize)> {
    // `.ptr.global.align` is one word in compiler output: split directives at their dots.
    let spaced = text.replace('.', " .");
    let mut words = spaced.split_whitespace().peekable();
    if words.next()? != ".param" {
        return None;
    }
    let mut align = None;
    let mut scalar = None;
    let mut name = None;
    while let Some(word) = words.next() {
        match word.strip_prefix('.') {
            Some("align") => {
                let value: usize = words.next()?.parse().ok()?;
                if !value.is_power_of_two() {
                    return None;
                }
                // Before the type: the parameter's alignment. After `.ptr`: the alignment of
                // the memory the pointer points to, which does not change the layout.
                if scalar.is_none() {
                    align = Some(value);
                }
            }
            Some("ptr" | "global" | "const" | "shared" | "local") => {}
            Some(other) => {
                if scalar.is_some() {
                    return None;
                }
                scalar = Some(type_size(other)?);
            }
            None => {
                if name.is_some() {
                    return None;
                }
                name = Some(word);
            }
        }
    }
    let scalar = scalar?;
    let name = name?;
    let (base, count) = match name.split_once('[') {
        Some((base, rest)) => {
            let count: usize = rest.strip_suffix(']')?.trim().parse().ok()?;
            (base, count)
        }
        None => (name, 1),
    };
    if !is_identifier(base) || count == 0 {
        return None;
    }
    Some((scalar.checked_mul(count)?, align.unwrap_or(scalar)))
}

/// The entries of a PTX module, or `None` when the text is not PTX the simulator can read
/// (no `.version` directive, a malformed entry signature, or no visible entry at all).
pub fn parse(text: &str) -> Option<Vec<Entry>> {
    let text = strip_comments(text);
    if !text.split_whitespace().any(|word| word == ".version") {
        return None;
    }
    let mut entries = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(".entry") {
        let before = rest[..at].trim_end();
        let after = &rest[at + ".entry".len()..];
        rest = after;
        // Only whole words: `.entry` preceded by `.visible` (or `.weak`) is a kernel the host
        // can look up; a bare `.entry` is not visible outside the module.
        if !after.starts_with(|c: char| c.is_whitespace()) {
            continue;
        }
        if !(before.ends_with(".visible") || before.ends_with(".weak")) {
            continue;
        }
        let after = after.trim_start();
        let name_end = after
            .find(|c: char| c.is_whitespace() || c == '(' || c == '{')
            .unwrap_or(after.len());
        let name = &after[..name_end];
        if !is_identifier(name) {
            return None;
        }
        let tail = after[name_end..].trim_start();
        let mut params = Vec::new();
        if let Some(list) = tail.strip_prefix('(') {
            let close = list.find(')')?;
            let inner = list[..close].trim();
            let mut offset = 0usize;
            for declaration in inner.split(',').filter(|_| !inner.is_empty()) {
                let (size, align) = parse_param(declaration.trim())?;
                offset = offset.checked_next_multiple_of(align)?;
                params.push(Param { offset, size });
                offset = offset.checked_add(size)?;
            }
            rest = &list[close + 1..];
        }
        // A body must follow (after optional performance directives such as `.maxntid`).
        if !rest.contains('{') {
            return None;
        }
        if entries.iter().any(|e: &Entry| e.name == name) {
            return None;
        }
        entries.push(Entry {
            name: name.to_string(),
            params,
        });
    }
    (!entries.is_empty()).then_some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_test_kernels() {
        let entries = parse(include_str!("../../../kernels/test_kernels.ptx")).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            ["fill_u32", "add_u32", "copy_u32", "add_one", "spin"]
        );
        assert_eq!(entries[0].sizes(), [8, 4, 4]);
        assert_eq!(
            entries[2].params,
            [
                Param { offset: 0, size: 8 },
                Param { offset: 8, size: 8 },
                Param {
                    offset: 16,
                    size: 4
                }
            ]
        );
        assert_eq!(entries[3].param_bytes(), 12);
        assert_eq!(entries[4].param_bytes(), 8);
    }

    #[test]
    fn aligns_parameters() {
        let text = ".version 7.0\n.visible .entry k(\n .param .u8 a,\n .param .u32 b,\n \
                    .param .align 16 .b8 c[24],\n .param .u64 .ptr.global.align 4 d\n)\n{ ret; }";
        let entries = parse(text).unwrap();
        let layout: Vec<(usize, usize)> = entries[0]
            .params
            .iter()
            .map(|p| (p.offset, p.size))
            .collect();
        assert_eq!(layout, [(0, 1), (4, 4), (16, 24), (40, 8)]);
    }

    #[test]
    fn refuses_what_is_not_ptx() {
        assert!(parse("").is_none());
        assert!(parse("\x7fELF binary").is_none());
        assert!(parse(".version 7.0\n.target sm_52\n").is_none());
        assert!(parse(".version 7.0\n.visible .entry k(.param .q32 x)\n{}").is_none());
        assert!(parse(".version 7.0\n.entry hidden()\n{}").is_none());
        let empty = parse(".version 7.0\n.visible .entry k()\n{ ret; }").unwrap();
        assert!(empty[0].params.is_empty());
    }
}
