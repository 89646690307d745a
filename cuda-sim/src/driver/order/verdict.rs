//! A run's verdict as JSON: its violations, its leaks and its calls. Rendered from plain data,
//! so that the checker can write it before a strict abort without depending on the simulator's
//! state (`report.rs` gathers that state at exit).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A note: something worth knowing that is not a misuse (strict mode ignores it).
#[derive(Clone, Debug)]
pub struct Note {
    pub kind: &'static str,
    pub message: String,
}

/// A reported misuse.
#[derive(Clone, Debug)]
pub struct Violation {
    pub kind: &'static str,
    pub message: String,
    pub call: &'static str,
    pub seq: u64,
}

fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn render_parts(
    violations: &[Violation],
    notes: &[Note],
    leaks: &BTreeMap<&'static str, u64>,
) -> String {
    let mut out = String::from("{\"violations\":[");
    for (i, v) in violations.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{{\"kind\":{},\"message\":{},\"call\":{},\"seq\":{}}}",
            quote(v.kind),
            quote(&v.message),
            quote(v.call),
            v.seq
        );
    }
    out.push_str("],\"notes\":[");
    for (i, note) in notes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{{\"kind\":{},\"message\":{}}}",
            quote(note.kind),
            quote(&note.message)
        );
    }
    out.push_str("],\"leaks\":{");
    for (i, (key, n)) in leaks.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}:{n}", quote(key));
    }
    out.push_str("},\"calls\":{");
    for (i, (name, n)) in crate::base::calls::counts().iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}:{n}", quote(name));
    }
    let _ = writeln!(out, "}},\"pid\":{}}}", std::process::id());
    out
}

/// In strict mode, just before the abort: the report of the violations so far (the abort
/// runs no exit handler, so leaks are not counted).
pub fn write_before_abort(violations: &[Violation]) {
    write(&render_parts(violations, &[], &BTreeMap::new()));
}

/// Writes `report` where `CUDA_SIM_REPORT` says.
pub fn write(report: &str) {
    let Ok(path) = std::env::var("CUDA_SIM_REPORT") else {
        return;
    };
    if path.is_empty() {
        return;
    }
    let path = path.replace("%p", &std::process::id().to_string());
    if let Err(error) = std::fs::write(&path, report) {
        eprintln!("cuda-sim: cannot write the report to {path}: {error}");
    }
}
