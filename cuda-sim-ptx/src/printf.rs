//! Device `printf` (`vprintf(fmt, args)`): C formatting of the packed argument buffer.
//! Arguments are laid out as the CUDA compiler packs them: each aligned to its size, ints
//! of `%d`-class conversions 4 bytes (8 with `l`/`ll`/`z`/`j`/`t`), doubles and pointers 8.

use crate::Fault;

const MAX_STRING: u64 = 1 << 16;

type Read<'a> = dyn FnMut(u64, u32) -> Result<u64, Fault> + 'a;

fn read_cstr(read: &mut Read, addr: u64, limit: Option<usize>) -> Result<Vec<u8>, Fault> {
    let mut out = Vec::new();
    let mut a = addr;
    while (out.len() as u64) < MAX_STRING && limit.is_none_or(|l| out.len() < l) {
        let b = read(a, 1)? as u8;
        if b == 0 {
            break;
        }
        out.push(b);
        a += 1;
    }
    Ok(out)
}

struct Spec {
    left: bool,
    plus: bool,
    space: bool,
    alt: bool,
    zero: bool,
    width: usize,
    prec: Option<usize>,
}

fn pad(s: &mut String, body: String, spec: &Spec, numeric_zero: bool) {
    let len = body.chars().count();
    if len >= spec.width {
        s.push_str(&body);
    } else if spec.left {
        s.push_str(&body);
        s.extend(std::iter::repeat_n(' ', spec.width - len));
    } else if numeric_zero && spec.zero {
        // Zeros go after the sign / 0x prefix.
        let split = body
            .find(|c: char| !matches!(c, '+' | '-' | ' '))
            .map(|i| {
                if body[i..].starts_with("0x") || body[i..].starts_with("0X") {
                    i + 2
                } else {
                    i
                }
            })
            .unwrap_or(0);
        s.push_str(&body[..split]);
        s.extend(std::iter::repeat_n('0', spec.width - len));
        s.push_str(&body[split..]);
    } else {
        s.extend(std::iter::repeat_n(' ', spec.width - len));
        s.push_str(&body);
    }
}

/// `%e` body of a finite non-negative value with `prec` digits: "d.ddde+XX".
fn exp_form(v: f64, prec: usize, upper: bool) -> (String, i32) {
    let s = format!("{:.*e}", prec, v);
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = exp.parse().unwrap_or(0);
    let body = format!(
        "{mant}{}{}{:02}",
        if upper { 'E' } else { 'e' },
        if e < 0 { '-' } else { '+' },
        e.abs()
    );
    (body, e)
}

fn strip_zeros(s: &str) -> String {
    // Removes trailing zeros of the fraction (and a trailing point), keeping an exponent.
    let (num, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let num = if num.contains('.') {
        num.trim_end_matches('0').trim_end_matches('.')
    } else {
        num
    };
    format!("{num}{exp}")
}

fn float(v: f64, conv: u8, spec: &Spec) -> String {
    let upper = conv.is_ascii_uppercase();
    let sign = if v.is_sign_negative() && !v.is_nan() {
        "-"
    } else if spec.plus {
        "+"
    } else if spec.space {
        " "
    } else {
        ""
    };
    let a = v.abs();
    if !a.is_finite() {
        let t = if a.is_nan() { "nan" } else { "inf" };
        return format!(
            "{sign}{}",
            if upper {
                t.to_uppercase()
            } else {
                t.to_string()
            }
        );
    }
    let prec = spec.prec.unwrap_or(6);
    let body = match conv.to_ascii_lowercase() {
        b'f' => {
            let s = format!("{:.*}", prec, a);
            if spec.alt && prec == 0 {
                format!("{s}.")
            } else {
                s
            }
        }
        b'e' => exp_form(a, prec, upper).0,
        b'g' => {
            let p = if prec == 0 { 1 } else { prec };
            let (_, x) = exp_form(a, p - 1, upper);
            let s = if x < p as i32 && x >= -4 {
                format!("{:.*}", (p as i32 - 1 - x) as usize, a)
            } else {
                exp_form(a, p - 1, upper).0
            };
            if spec.alt { s } else { strip_zeros(&s) }
        }
        _ => {
            // %a: hexadecimal float.
            let bits = a.to_bits();
            let e = ((bits >> 52) & 0x7ff) as i64;
            let m = bits & ((1u64 << 52) - 1);
            let (lead, e) = if e == 0 {
                (0, if m == 0 { 0 } else { -1022 })
            } else {
                (1, e - 1023)
            };
            let frac = format!("{:013x}", m);
            let frac = match spec.prec {
                Some(p) => frac[..p.min(13)].to_string(),
                None => frac.trim_end_matches('0').to_string(),
            };
            let s = if frac.is_empty() {
                format!("0x{lead}p{e:+}")
            } else {
                format!("0x{lead}.{frac}p{e:+}")
            };
            if upper { s.to_uppercase() } else { s }
        }
    };
    format!("{sign}{body}")
}

fn integer(v: u64, signed: bool, bytes: u32, conv: u8, spec: &Spec) -> String {
    let bits = bytes * 8;
    let (neg, mag) = if signed {
        let s = if bits == 64 {
            v as i64
        } else {
            ((v << (64 - bits)) as i64) >> (64 - bits)
        };
        (s < 0, s.unsigned_abs())
    } else {
        (
            false,
            if bits == 64 {
                v
            } else {
                v & ((1u64 << bits) - 1)
            },
        )
    };
    let mut digits = match conv {
        b'x' => format!("{mag:x}"),
        b'X' => format!("{mag:X}"),
        b'o' => format!("{mag:o}"),
        _ => format!("{mag}"),
    };
    if let Some(p) = spec.prec {
        if p == 0 && mag == 0 {
            digits.clear();
        }
        while digits.len() < p {
            digits.insert(0, '0');
        }
    }
    let prefix = match conv {
        b'x' if spec.alt && mag != 0 => "0x",
        b'X' if spec.alt && mag != 0 => "0X",
        b'o' if spec.alt && !digits.starts_with('0') => "0",
        _ => "",
    };
    let sign = if neg {
        "-"
    } else if signed && spec.plus {
        "+"
    } else if signed && spec.space {
        " "
    } else {
        ""
    };
    format!("{sign}{prefix}{digits}")
}

/// Formats one `vprintf` call: `fmt` and `args` are generic addresses.
pub(crate) fn vprintf(read: &mut Read, fmt: u64, args: u64) -> Result<String, Fault> {
    let f = read_cstr(read, fmt, None)?;
    let mut out = String::new();
    let mut off = 0u64;
    let mut next_arg = |read: &mut Read, size: u32| -> Result<u64, Fault> {
        off = off.next_multiple_of(size as u64);
        let v = read(args + off, size)?;
        off += size as u64;
        Ok(v)
    };
    let mut i = 0;
    while i < f.len() {
        let c = f[i];
        if c != b'%' {
            // Copy a run of literal bytes (UTF-8 is kept as is).
            let start = i;
            while i < f.len() && f[i] != b'%' {
                i += 1;
            }
            out.push_str(&String::from_utf8_lossy(&f[start..i]));
            continue;
        }
        i += 1;
        let mut spec = Spec {
            left: false,
            plus: false,
            space: false,
            alt: false,
            zero: false,
            width: 0,
            prec: None,
        };
        while i < f.len() {
            match f[i] {
                b'-' => spec.left = true,
                b'+' => spec.plus = true,
                b' ' => spec.space = true,
                b'#' => spec.alt = true,
                b'0' => spec.zero = true,
                _ => break,
            }
            i += 1;
        }
        if f.get(i) == Some(&b'*') {
            let w = next_arg(read, 4)? as u32 as i32;
            if w < 0 {
                spec.left = true;
            }
            spec.width = w.unsigned_abs() as usize;
            i += 1;
        } else {
            while let Some(d) = f.get(i).filter(|d| d.is_ascii_digit()) {
                spec.width = spec.width * 10 + (d - b'0') as usize;
                i += 1;
            }
        }
        if f.get(i) == Some(&b'.') {
            i += 1;
            if f.get(i) == Some(&b'*') {
                let p = next_arg(read, 4)? as u32 as i32;
                spec.prec = if p < 0 { None } else { Some(p as usize) };
                i += 1;
            } else {
                let mut p = 0usize;
                while let Some(d) = f.get(i).filter(|d| d.is_ascii_digit()) {
                    p = p * 10 + (d - b'0') as usize;
                    i += 1;
                }
                spec.prec = Some(p);
            }
        }
        let mut long = false;
        let mut short = 0; // `h`: 1 (short), `hh`: 2 (char)
        while let Some(&l) = f.get(i) {
            match l {
                b'l' | b'z' | b'j' | b't' | b'q' => long = true,
                b'h' => short += 1,
                b'L' => {}
                _ => break,
            }
            i += 1;
        }
        let Some(&conv) = f.get(i) else {
            out.push('%');
            break;
        };
        i += 1;
        match conv {
            b'%' => out.push('%'),
            b'd' | b'i' | b'u' | b'x' | b'X' | b'o' => {
                let bytes = if long { 8 } else { 4 };
                let v = next_arg(read, bytes)?;
                // `h`/`hh`: the (promoted) argument converted to short / char, as in C.
                let fmt_bytes = match (long, short) {
                    (false, 1) => 2,
                    (false, s) if s >= 2 => 1,
                    _ => bytes,
                };
                let body = integer(v, matches!(conv, b'd' | b'i'), fmt_bytes, conv, &spec);
                let zero_ok = spec.prec.is_none();
                pad(&mut out, body, &spec, zero_ok);
            }
            b'c' => {
                let v = next_arg(read, 4)? as u8;
                pad(&mut out, (v as char).to_string(), &spec, false);
            }
            b's' => {
                let p = next_arg(read, 8)?;
                let s = if p == 0 {
                    "(null)".to_string()
                } else {
                    String::from_utf8_lossy(&read_cstr(read, p, spec.prec)?).into_owned()
                };
                pad(&mut out, s, &spec, false);
            }
            b'p' => {
                let p = next_arg(read, 8)?;
                pad(&mut out, format!("0x{p:x}"), &spec, false);
            }
            b'f' | b'F' | b'e' | b'E' | b'g' | b'G' | b'a' | b'A' => {
                let v = f64::from_bits(next_arg(read, 8)?);
                let body = float(v, conv, &spec);
                pad(&mut out, body, &spec, v.is_finite());
            }
            other => {
                // Unknown conversion: printed as written, as glibc does.
                out.push('%');
                out.push(other as char);
            }
        }
    }
    Ok(out)
}
