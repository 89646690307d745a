//! Call counting and fault injection (`CUDA_SIM_FAIL`): the single path every exported
//! function goes through.

use std::sync::OnceLock;

use crate::base::errors;
use crate::base::types::CuResult;

/// `(function, n-th call, status)` from `CUDA_SIM_FAIL=cuName:N:CUDA_ERROR_NAME[,…]`.
fn plan() -> &'static Vec<(String, u64, CuResult)> {
    static PLAN: OnceLock<Vec<(String, u64, CuResult)>> = OnceLock::new();
    PLAN.get_or_init(|| {
        let Ok(text) = std::env::var("CUDA_SIM_FAIL") else {
            return Vec::new();
        };
        let mut plan = Vec::new();
        for item in text
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            let parts: Vec<&str> = item.split(':').collect();
            let parsed = match parts.as_slice() {
                [name, n, status] => n.parse::<u64>().ok().and_then(|n| {
                    let code = errors::code_of(status).or_else(|| status.parse().ok())?;
                    Some((name.to_string(), n, code))
                }),
                _ => None,
            };
            match parsed {
                Some(entry) => plan.push(entry),
                None => eprintln!("cuda-sim: ignoring malformed CUDA_SIM_FAIL entry {item:?}"),
            }
        }
        plan
    })
}

pub use crate::base::calls::current_call;

/// The status codes of one library's call path: the driver's (`CUresult`), cuBLAS's or
/// cuRAND's. A panic, a call from a destructor or a host function, and an injected fault
/// (`CUDA_SIM_FAIL`, whose status is taken as this library's code) answer in the library's
/// own codes.
pub struct Statuses {
    pub success: CuResult,
    /// A call the driver forbids here (from a user object's destructor or a host function).
    pub not_permitted: CuResult,
    /// A panic inside the simulator.
    pub internal: CuResult,
}

/// The driver's codes.
pub const DRIVER: Statuses = Statuses {
    success: errors::SUCCESS,
    not_permitted: errors::NOT_PERMITTED,
    internal: 999,
};

/// Counts the call, applies the fault plan, and runs `body`.
pub fn call(name: &'static str, body: impl FnOnce() -> Result<(), CuResult>) -> CuResult {
    call_as(name, &DRIVER, body)
}

/// [`call`] for a function answering in `statuses` (the simulated libraries' exports).
pub fn call_as(
    name: &'static str,
    statuses: &Statuses,
    body: impl FnOnce() -> Result<(), CuResult>,
) -> CuResult {
    crate::check::report::register_exit_handler();
    let (seq, n) = crate::base::calls::enter(name);
    if crate::resources::user_objects::in_destructor() {
        // The driver forbids CUDA calls from a user object's destructor.
        let _ = crate::with_sim(|sim| {
            sim.checker.violation(
                "call-from-destructor",
                format!("{name} called from a user object's destructor"),
            );
            Ok(())
        });
        return statuses.not_permitted;
    }
    if crate::resources::deferred::in_host_function() {
        // The driver forbids CUDA calls from a host function; the real one may fail or
        // deadlock, this one reports the call and fails it.
        let _ = crate::with_sim(|sim| {
            sim.checker.violation(
                "call-from-host-function",
                format!("{name} called from a host function (cuLaunchHostFunc or a host node)"),
            );
            Ok(())
        });
        return statuses.not_permitted;
    }
    if let Some((_, _, code)) = plan().iter().find(|(f, at, _)| f == name && *at == n) {
        return *code;
    }
    let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => statuses.success,
        Ok(Err(code)) => code,
        Err(_) => {
            eprintln!("cuda-sim: internal error in {name} (call #{seq})");
            statuses.internal
        }
    };
    // User objects whose last reference this call dropped: destructors run now that the
    // simulator's lock is released.
    crate::resources::user_objects::run_pending();
    result
}
