//! A fuzzer of handles-cuda's safe API against the strict simulator: random programs of safe
//! calls ([`program`]), run one per child process ([`interp`] in the child, [`runner`] in the
//! parent), judged by the simulator's report and what the child saw, and shrunk when they
//! fail. The test file `fuzz_safe_api.rs` drives it.
//!
//! Why plain proptest (already a dev-dependency of this crate) and not
//! `proptest-state-machine` or `arbitrary`: an op names its handles by slot, and a slot is
//! resolved when the op runs (an empty one is replaced by an occupied one of its kind, or the op
//! is skipped), so every subsequence of a program is a valid program. Proptest's `Vec` value
//! trees then shrink it with no model of the state to keep consistent; the state lives in the
//! child, where the real library is. `arbitrary` would need a separate shrinker.

pub mod interp;
pub mod program;
pub mod runner;
