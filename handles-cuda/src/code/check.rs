//! Ready-made bounds checks for kernels, for [`KernelHandle::checked`](crate::KernelHandle::checked): the usual shapes of a
//! kernel's accesses, each a rule over parameter positions, composable with [`Check::and`].
//!
//! | the kernel | the check |
//! |---|---|
//! | touches element `i` of some buffers for `i < n` only, `n` a parameter (`if (i < n) y[i] = …`, or a grid-stride loop `for (i = …; i < n; i += stride)`) | [`per_thread`]`(n_position, [buffer positions])` |
//! | touches element `i` for `i` below its global thread index bound, with no guard | [`per_thread`]`(Count::Threads, [..])` |
//! | writes one element per block (`out[blockIdx.x]`, a block reduction) | [`per_block`]`([..])` |
//! | touches `k` elements per thread: `k` contiguous ones, or `k` steps of a grid-stride loop with no guard | [`elements_per_thread`]`(k, [..])` |
//! | uses `bytes` of dynamic shared memory per thread of its block | [`shared_per_thread`]`(bytes)` |
//! | anything else | [`custom`]`(|args, config| …)` (or [`KernelHandle::typed`](crate::KernelHandle::typed)) |
//!
//! ```no_run
//! use handles_cuda::code::{Elements, check};
//! use handles_cuda::{KernelHandle, LibraryHandle};
//!
//! # fn main() -> handles_cuda::Result<()> {
//! # let library = LibraryHandle::load_file("block_sum.ptx")?;
//! // block_sum(in, out, n): each block sums its share of in[0..n] in shared memory (one
//! // f32 per thread) and writes out[blockIdx.x].
//! // SAFETY: block_sum reads in[i] for i < n only, writes out[b] for its block b only, and
//! // uses blockDim.x floats of dynamic shared memory: what the check below covers.
//! let block_sum = unsafe {
//!     KernelHandle::get(&library, "block_sum")?.checked::<(Elements<f32>, Elements<f32>, u32)>(
//!         check::per_thread(2, [0])
//!             .and(check::per_block([1]))
//!             .and(check::shared_per_thread(4)),
//!     )?
//! };
//! # let _ = block_sum;
//! # Ok(()) }
//! ```
//!
//! Positions count the kernel's parameters from 0. A rule that names a parameter for what it
//! is not (a count that is not an integer, a buffer that is not [`Elements<T>`], a position
//! past the last) is refused by [`KernelHandle::checked`](crate::KernelHandle::checked) with [`Error::BadCheck`]; a launch
//! the rules refuse is an [`Error::OutOfBounds`] (or [`Error::SharedOutOfBounds`]) naming the
//! kernel and the parameter, before the driver is called. A rule counts elements of
//! [`Elements<T>`] parameters only: a [`Buffer`](crate::code::Buffer) has bytes and no element
//! type, so its checks are hand-written ([`custom`]).
//!
//! [`Elements<T>`]: crate::code::Elements

use std::marker::PhantomData;

use crate::code::config::LaunchConfig;
use crate::code::params::KernelParams;
use crate::error::{Error, Result};

/// A hand-written check a [`TypedKernel`](crate::code::TypedKernel) runs on each launch's arguments and configuration
/// before the launch: `Ok` only when the kernel, given them, stays inside its buffers. The
/// ready-made ones are in [`crate::code::check`].
pub type BoundsCheck<P> = for<'a> fn(&<P as KernelParams>::Args<'a>, &LaunchConfig) -> Result<()>;

/// How many elements a rule needs, where it is not a fixed number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Count {
    /// The value of the integer parameter at this position (a `usize` converts to this). A
    /// negative value counts as a C kernel compares it with an unsigned index: its bits as the
    /// unsigned type of its width, so it is refused.
    Param(usize),
    /// The launch's threads: the grid's blocks times the block's threads, in all dimensions.
    Threads,
    /// The launch's blocks: the grid's, in all dimensions.
    Blocks,
    /// A number fixed when the kernel is declared.
    Fixed(usize),
}

impl From<usize> for Count {
    /// A parameter position: [`Count::Param`].
    fn from(position: usize) -> Count {
        Count::Param(position)
    }
}

/// One rule of a [`Check`].
#[derive(Clone, Debug)]
enum Rule {
    /// Each parameter in `params` holds at least `count × times` elements.
    Elements {
        count: Count,
        times: u64,
        params: Vec<usize>,
    },
    /// The launch's dynamic shared memory is at least `per_thread` bytes per thread of a block.
    Shared { per_thread: u64 },
}

/// A kernel's bounds check for [`KernelHandle::checked`](crate::KernelHandle::checked): ready-made rules from this module's
/// functions and hand-written checks ([`custom`]), all of which a launch must pass.
pub struct Check<P: KernelParams> {
    rules: Vec<Rule>,
    custom: Vec<BoundsCheck<P>>,
    _params: PhantomData<fn(P)>,
}

impl<P: KernelParams> Clone for Check<P> {
    fn clone(&self) -> Self {
        Check {
            rules: self.rules.clone(),
            custom: self.custom.clone(),
            _params: PhantomData,
        }
    }
}

impl<P: KernelParams> std::fmt::Debug for Check<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("rules", &self.rules)
            .field("custom", &self.custom.len())
            .finish()
    }
}

impl<P: KernelParams> Check<P> {
    fn rule(rule: Rule) -> Self {
        Check {
            rules: vec![rule],
            custom: Vec::new(),
            _params: PhantomData,
        }
    }

    /// This check and `other`: a launch must pass both.
    pub fn and(mut self, other: Check<P>) -> Check<P> {
        self.rules.extend(other.rules);
        self.custom.extend(other.custom);
        self
    }

    /// Refuses rules that name a parameter for what it is not, before any launch.
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |param, what| {
            Err(Error::BadCheck {
                kernel: String::new(),
                param,
                what,
            })
        };
        let count = P::sizes().len();
        for rule in &self.rules {
            let Rule::Elements {
                count: needed,
                params,
                ..
            } = rule
            else {
                continue;
            };
            if let Count::Param(position) = *needed {
                if position >= count {
                    return bad(position, "is past the last parameter");
                }
                if !P::is_count(position) {
                    return bad(
                        position,
                        "is not an integer scalar, so it cannot be a count",
                    );
                }
            }
            for &position in params {
                if position >= count {
                    return bad(position, "is past the last parameter");
                }
                if !P::holds_elements(position) {
                    return bad(
                        position,
                        "is not an `Elements<T>` parameter, whose elements the rules count",
                    );
                }
            }
        }
        Ok(())
    }

    /// Runs every rule, then every hand-written check, on a launch's arguments.
    #[inline]
    pub(crate) fn run(&self, args: &P::Args<'_>, config: &LaunchConfig) -> Result<()> {
        for rule in &self.rules {
            match rule {
                Rule::Elements {
                    count,
                    times,
                    params,
                } => {
                    let needed = needed::<P>(*count, args, config).saturating_mul(*times);
                    for &param in params {
                        // `validate` made sure each is an `Elements<T>` parameter.
                        let len = P::elements_at(args, param).unwrap_or(0);
                        if needed > len as u64 {
                            return Err(out_of_bounds(param, needed, len));
                        }
                    }
                }
                Rule::Shared { per_thread } => {
                    let needed = per_thread.saturating_mul(config.threads_per_block());
                    if needed > u64::from(config.shared_mem_bytes) {
                        return Err(Error::SharedOutOfBounds {
                            kernel: String::new(),
                            needed,
                            bytes: config.shared_mem_bytes,
                        });
                    }
                }
            }
        }
        for check in &self.custom {
            check(args, config)?;
        }
        Ok(())
    }
}

/// The elements `count` stands for in this launch.
#[inline]
fn needed<P: KernelParams>(count: Count, args: &P::Args<'_>, config: &LaunchConfig) -> u64 {
    let blocks = || {
        config
            .grid
            .iter()
            .fold(1u64, |n, &d| n.saturating_mul(u64::from(d)))
    };
    match count {
        // `validate` made sure it is an integer parameter.
        Count::Param(position) => P::count_at(args, position).unwrap_or(u64::MAX),
        Count::Threads => blocks().saturating_mul(config.threads_per_block()),
        Count::Blocks => blocks(),
        Count::Fixed(n) => n as u64,
    }
}

/// The kernel touches element `i` of each parameter in `buffers` only for `i < n`: a guarded
/// kernel (`i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) …`) or a grid-stride loop
/// bounded by `n`. Each of them must hold at least `n` elements. `n` is a parameter position
/// (a `usize`) or a [`Count`]: [`Count::Threads`] for a kernel with no guard, whose thread `t`
/// touches element `t`.
pub fn per_thread<P: KernelParams>(
    n: impl Into<Count>,
    buffers: impl IntoIterator<Item = usize>,
) -> Check<P> {
    Check::rule(Rule::Elements {
        count: n.into(),
        times: 1,
        params: buffers.into_iter().collect(),
    })
}

/// The kernel touches element `b` of each parameter in `buffers` only for its own block's
/// index `b` (linear over the grid's dimensions): one output per block, as a block reduction
/// writes. Each must hold at least as many elements as the launch has blocks.
pub fn per_block<P: KernelParams>(buffers: impl IntoIterator<Item = usize>) -> Check<P> {
    Check::rule(Rule::Elements {
        count: Count::Blocks,
        times: 1,
        params: buffers.into_iter().collect(),
    })
}

/// Each thread of the kernel touches at most `k` elements of each parameter in `buffers`, all
/// below `k` times the launch's threads: `k` contiguous ones (thread `t` touches `t·k` to
/// `t·k + k − 1`) or `k` steps of an unguarded grid-stride loop. Each must hold at least
/// `k × threads` elements.
pub fn elements_per_thread<P: KernelParams>(
    k: usize,
    buffers: impl IntoIterator<Item = usize>,
) -> Check<P> {
    Check::rule(Rule::Elements {
        count: Count::Threads,
        times: k as u64,
        params: buffers.into_iter().collect(),
    })
}

/// The kernel uses at most `bytes` of dynamic shared memory per thread of its block (indexed by
/// `threadIdx`): the launch must give at least `bytes` times the block's threads
/// ([`LaunchConfig::with_shared_mem`](crate::LaunchConfig::with_shared_mem)).
pub fn shared_per_thread<P: KernelParams>(bytes: usize) -> Check<P> {
    Check::rule(Rule::Shared {
        per_thread: bytes as u64,
    })
}

/// A hand-written check, for what no rule above describes: `Ok` only when the kernel, given
/// these arguments and this configuration, stays inside its buffers. Its errors come back from
/// the launch as they are; [`out_of_bounds`] makes the usual one.
pub fn custom<P: KernelParams>(check: BoundsCheck<P>) -> Check<P> {
    Check {
        rules: Vec::new(),
        custom: vec![check],
        _params: PhantomData,
    }
}

/// The error of a launch that needs `needed` elements of parameter `param`, which holds `len`:
/// an [`Error::OutOfBounds`] whose kernel the launch fills in.
pub fn out_of_bounds(param: usize, needed: u64, len: usize) -> Error {
    Error::OutOfBounds {
        kernel: String::new(),
        param,
        needed,
        len,
    }
}
