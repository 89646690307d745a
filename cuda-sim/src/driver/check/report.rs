//! The report written at process exit (`CUDA_SIM_REPORT`): violations, leaks by type, and
//! calls by function, as one JSON object. After it the driver is shut down: every call
//! returns `CUDA_ERROR_DEINITIALIZED`, as the real driver does once its exit handler ran.

use std::collections::BTreeMap;

use crate::order::verdict::{render_parts, write};
use crate::{Sim, shut_down};

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
    // A module's library is counted as the module; the CUDA runtime's modules are its own.
    add(
        "library",
        (sim.libraries.len() as u64).saturating_sub(sim.extra.modules.len() as u64),
    );
    add(
        "module",
        sim.extra.modules.values().filter(|m| !m.runtime).count() as u64,
    );
    // Body graphs are their conditional node's, not the program's.
    add(
        "graph",
        (sim.graphs.len() - sim.conditionals.bodies.len()) as u64,
    );
    add("graph_exec", sim.execs.len() as u64);
    add("user_object", sim.user_objects.len() as u64);
    // A module variable goes with its library, which is counted itself.
    for alloc in sim
        .allocs
        .values()
        .filter(|a| a.kind != crate::resources::memory::AllocKind::Global)
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
    add("cublas_handle", sim.library_handles.blas.len() as u64);
    add("cublaslt_handle", sim.library_handles.blas_lt.len() as u64);
    add(
        "cublaslt_descriptor",
        sim.library_handles.lt_objects.len() as u64,
    );
    add(
        "curand_generator",
        sim.library_handles.generators.len() as u64,
    );
    leaks
}

/// The JSON report. Without a simulator state (`cuInit` never succeeded, for example because
/// it was failed on purpose) it has no violations and no leaks, only the calls.
pub fn render(sim: Option<&Sim>) -> String {
    let violations = sim.map_or(&[][..], |sim| &sim.checker.violations[..]);
    let leaks = sim.map(leaks).unwrap_or_default();
    let notes = sim.map(|sim| sim.initcheck.notes()).unwrap_or_default();
    if let Some(first) = notes.first() {
        eprintln!(
            "cuda-sim: note {}: {} ({} notes in all; they are not violations)",
            first.kind,
            first.message,
            notes.len()
        );
    }
    render_parts(violations, &notes, &leaks)
}

/// Registers [`at_exit`] once, on the first call of any exported function: a report is
/// written even when `cuInit` itself failed (for instance by `CUDA_SIM_FAIL`).
pub fn register_exit_handler() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| crate::base::sys::at_exit(at_exit));
}

/// The exit handler registered by [`register_exit_handler`].
pub extern "C" fn at_exit() {
    crate::device::printf::flush();
    write(&shut_down(render));
}
