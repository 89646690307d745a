//! Tokens of PTX text. Whitespace and comments are dropped; `.version` and friends have no
//! terminator, so the parser works on the token stream, not on lines.

use crate::LoadError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tok<'a> {
    /// Identifiers, directives, opcodes, registers: `ld.global.u32`, `%r1`, `.reg`, `$L__BB0_2`.
    Id(&'a str),
    /// Numbers as written: `42`, `0x1F`, `0f3F800000`, `1.5`.
    Num(&'a str),
    /// A string literal without its quotes.
    Str(&'a str),
    /// One punctuation character.
    P(u8),
}

fn id_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || matches!(c, b'_' | b'$' | b'%' | b'.')
}

fn id_continue(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.')
}

/// Splits `text` into tokens, with the line of each (for error messages).
pub(crate) fn lex(text: &str) -> Result<(Vec<Tok<'_>>, Vec<u32>), LoadError> {
    let b = text.as_bytes();
    let mut toks = Vec::new();
    let mut lines = Vec::new();
    let mut line = 1u32;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                if b[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
            i = (i + 2).min(b.len());
        } else if c == b'"' {
            let start = i + 1;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            if i >= b.len() {
                return Err(LoadError::Invalid(format!(
                    "line {line}: unterminated string"
                )));
            }
            toks.push(Tok::Str(&text[start..i]));
            lines.push(line);
            i += 1;
        } else if id_start(c) {
            let start = i;
            i += 1;
            loop {
                if i < b.len() && id_continue(b[i]) {
                    i += 1;
                } else if i + 1 < b.len() && b[i] == b':' && b[i + 1] == b':' {
                    i += 2;
                } else {
                    break;
                }
            }
            let word = &text[start..i];
            if word.starts_with('.') {
                // A directive glued to its modifiers (`.reg.b32`, `.visible.entry`) is the
                // same as the words written apart.
                let mut from = 0;
                for (k, _) in word.match_indices('.').skip(1) {
                    toks.push(Tok::Id(&word[from..k]));
                    lines.push(line);
                    from = k;
                }
                toks.push(Tok::Id(&word[from..]));
            } else {
                toks.push(Tok::Id(word));
            }
            lines.push(line);
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                i += 1;
            }
            toks.push(Tok::Num(&text[start..i]));
            lines.push(line);
        } else if b"{}()[],;:+-@!<>=|".contains(&c) {
            toks.push(Tok::P(c));
            lines.push(line);
            i += 1;
        } else {
            return Err(LoadError::Invalid(format!(
                "line {line}: unexpected character {:?}",
                text[i..].chars().next().unwrap_or('?')
            )));
        }
    }
    Ok((toks, lines))
}

/// Integer literal: decimal, `0x` hex, `0b` binary, leading-zero octal, optional `U` suffix.
pub(crate) fn parse_int(s: &str) -> Option<u64> {
    let s = s.strip_suffix(['U', 'u']).unwrap_or(s);
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if let Some(h) = s.strip_prefix("0b").or_else(|| s.strip_prefix("0B")) {
        u64::from_str_radix(h, 2).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}
