//! A fuzzer of handles-cuda's safe API against the strict simulator: random programs of safe
//! calls ([`program`]), run one per child process ([`interp`] in the child, [`runner`] in the
//! parent), judged by the simulator's report and what the child saw, and shrunk when they
//! fail. The test file `fuzz_safe_api.rs` drives it.

pub mod interp;
pub mod program;
pub mod runner;
