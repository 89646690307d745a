//! The report written at process exit (`CUDA_SIM_REPORT`): violations, leaks by type, and
//! calls by function, as one JSON object. After it the driver is shut down: every call
//! returns `CUDA_ERROR_DEINITIALIZED`, as the real driver does once its exit handler ran.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::checker::Violation;
use super::{Sim, faults, shut_down};

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

/// Resources alive now that the program was expected to free, by type.
pub fn leaks(sim: &Sim) -> BTreeMap<&'static str, u64> {
    let mut leaks = BTreeMap::new();
    let mut add = |key: &'static str, n: u64| {
        if n > 0 {
            *leaks.entry(key).or_insert(0) += n;
        }
    };
    add("stream", sim.streams.len() as u64);
    add("event", sim.events.len() as u64);
    add(
        "pool",
        sim.pools
            .values()
            .filter(|p| !p.default && !p.zombie)
            .count() as u64,
    );
    // A module's library is counted as the module.
    add(
        "library",
        (sim.libraries.len() as u64).saturating_sub(sim.extra.modules.len() as u64),
    );
    add("module", sim.extra.modules.len() as u64);
    add("graph", sim.graphs.len() as u64);
    add("graph_exec", sim.execs.len() as u64);
    add("user_object", sim.user_objects.len() as u64);
    // A module variable goes with its library, which is counted itself.
    for alloc in sim
        .allocs
        .values()
        .filter(|a| a.kind != super::memory::AllocKind::Global)
    {
        add(alloc.kind.name(), 1);
    }
    for context in sim.contexts.values() {
        if context.primary {
            add("primary_context", context.retains);
        } else if context.green.is_none() {
            // A green context's context is counted as the green context.
            add("context", 1);
        }
    }
    add("green_context", sim.greens.len() as u64);
    add("physical_allocation", sim.vmm.handles.len() as u64);
    add("reservation", sim.vmm.reservations.len() as u64);
    leaks
}

/// The JSON report. Without a simulator state (`cuInit` never succeeded, for example because
/// it was failed on purpose) it has no violations and no leaks, only the calls.
pub fn render(sim: Option<&Sim>) -> String {
    let violations = sim.map_or(&[][..], |sim| &sim.checker.violations[..]);
    let leaks = sim.map(leaks).unwrap_or_default();
    render_parts(violations, &leaks)
}

fn render_parts(violations: &[Violation], leaks: &BTreeMap<&'static str, u64>) -> String {
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
    out.push_str("],\"leaks\":{");
    for (i, (key, n)) in leaks.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}:{n}", quote(key));
    }
    out.push_str("},\"calls\":{");
    for (i, (name, n)) in faults::counts().iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}:{n}", quote(name));
    }
    let _ = writeln!(out, "}},\"pid\":{}}}", std::process::id());
    out
}

/// Registers [`at_exit`] once, on the first call of any exported function: a report is
/// written even when `cuInit` itself failed (for instance by `CUDA_SIM_FAIL`).
pub fn register_exit_handler() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| super::sys::at_exit(at_exit));
}

/// The exit handler registered by [`register_exit_handler`].
pub extern "C" fn at_exit() {
    super::printf::flush();
    write(&shut_down(render));
}

/// In strict mode, just before the abort: the report of the violations so far (the abort
/// runs no exit handler, so leaks are not counted).
pub fn write_before_abort(violations: &[Violation]) {
    write(&render_parts(violations, &BTreeMap::new()));
}

/// Writes `report` where `CUDA_SIM_REPORT` says.
fn write(report: &str) {
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
