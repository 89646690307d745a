//! Kernel launches: a checked configuration, typed parameters, and the bookkeeping that keeps
//! a launch sound after it returns.
//!
//! A kernel is device code that this crate cannot inspect, so *what* it touches is the one
//! fact a caller must vouch for, once, in the `unsafe` constructor [`KernelHandle::typed`]:
//! the kernel's parameter types, and a bounds check under which it stays inside the buffers it
//! is given. Everything else a launch needs for soundness is done here, on every launch:
//!
//! - the configuration is checked before the driver sees it (zero dimensions, a block larger
//!   than the kernel allows on the stream's device, more dynamic shared memory than it allows,
//!   a grid not divisible by its cluster), so a bad one is an `Err` naming the field;
//! - every buffer passed is reported as used on the launch's stream (the ordering rule of
//!   `stream_order.rs`), so no free can overtake the kernel, and the same holds for a launch
//!   captured into a graph (the graph keeps the buffer instead);
//! - the kernel's library notes the launch's context, so that its unload waits for the kernel.

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUcontext, CUfunction};

use crate::code::check::{self, BoundsCheck, Check};
use crate::code::config::{LaunchConfig, config_error};
use crate::code::kernel::KernelHandle;
use crate::code::params::KernelParams;
use crate::driver::call::driver;
use crate::driver::current::current_raw;
use crate::error::{Error, GraphRule, LaunchProblem, Result};
use crate::exec::context::ContextHandle;
use crate::exec::event::EventHandle;
use crate::exec::stream::{Queued, StreamHandle};
use crate::memory::device_ptr::DevicePtrHandle;

/// Extra launch attributes for [`TypedKernel::launch_ex`] (`cuLaunchKernelEx`). Cooperative
/// and programmatic dependent launches are explained in [`crate::code::launch_attributes`].
#[derive(Clone, Debug, Default)]
pub struct LaunchOptions {
    /// Thread-block cluster dimensions (compute capability 9.0 and later); each grid dimension
    /// must be a multiple of the cluster's, and a cluster holds at most 8 blocks (the portable
    /// size).
    pub cluster: Option<[u32; 3]>,
    /// The launch's priority, overriding the stream's (lower numbers are higher priority).
    pub priority: Option<i32>,
    /// A cooperative launch (`CU_LAUNCH_ATTRIBUTE_COOPERATIVE`): every block is resident at
    /// once, so the grid may synchronise as a whole. The grid is checked against occupancy
    /// before the driver is called.
    pub cooperative: bool,
    /// Programmatic stream serialization
    /// (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`): this kernel may start
    /// before the previous kernel of the stream has finished; it waits for it with
    /// `griddepcontrol.wait` (`cudaGridDependencySynchronize`).
    pub programmatic_serialization: bool,
    /// An event that this launch records once every block has triggered
    /// (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT`).
    pub programmatic_event: Option<ProgrammaticEvent>,
}

impl LaunchOptions {
    pub(crate) fn check(&self, config: &LaunchConfig) -> Result<()> {
        self.check_attributes()?;
        let Some(cluster) = self.cluster else {
            return Ok(());
        };
        for (&axis, (&size, &blocks)) in
            ['x', 'y', 'z'].iter().zip(cluster.iter().zip(&config.grid))
        {
            if size == 0 || blocks % size != 0 {
                return Err(config_error(LaunchProblem::ClusterDivide {
                    axis,
                    size,
                    blocks,
                }));
            }
        }
        let blocks: u64 = cluster.iter().map(|&d| u64::from(d)).product();
        if blocks > 8 {
            return Err(config_error(LaunchProblem::ClusterSize { blocks }));
        }
        Ok(())
    }

    pub(crate) fn attributes(&self) -> ([sys::CUlaunchAttribute; MAX_ATTRIBUTES], u32) {
        // SAFETY: all zero bytes are a valid attribute: id 0 is `CU_LAUNCH_ATTRIBUTE_IGNORE`,
        // a variant of the id enum; the padding is bytes; the value is a union of integer
        // fields and plain structs of integers and pointers, for which zero is valid.
        let mut attributes: [sys::CUlaunchAttribute; MAX_ATTRIBUTES] =
            unsafe { std::mem::zeroed() };
        let mut count = 0;
        if let Some([x, y, z]) = self.cluster {
            let attribute = &mut attributes[count];
            attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attribute.value.clusterDim.x = x;
            attribute.value.clusterDim.y = y;
            attribute.value.clusterDim.z = z;
            count += 1;
        }
        if let Some(priority) = self.priority {
            let attribute = &mut attributes[count];
            attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PRIORITY;
            attribute.value.priority = priority;
            count += 1;
        }
        count += self.fill_attributes(&mut attributes[count..]);
        (attributes, count as u32)
    }
}

/// Attributes a launch can carry: cluster, priority, and those of `launch_attributes.rs`.
pub(crate) const MAX_ATTRIBUTES: usize = 5;

/// The event of a programmatic dependent launch ([`LaunchOptions::programmatic_event`]).
#[derive(Clone, Debug)]
pub struct ProgrammaticEvent {
    /// The event the launch records; it must have timing disabled, not be interprocess, and
    /// belong to the launch stream's context.
    pub event: EventHandle,
    /// Trigger as each block starts, rather than when it calls
    /// `griddepcontrol.launch_dependents` or exits (`triggerAtBlockStart`).
    pub trigger_at_block_start: bool,
}

/// A kernel with a known parameter list and a bounds check, launched with safe calls.
pub struct TypedKernel<P: KernelParams> {
    kernel: KernelHandle,
    check: Arc<Check<P>>,
    _params: PhantomData<fn(P)>,
}

impl<P: KernelParams> Clone for TypedKernel<P> {
    fn clone(&self) -> Self {
        TypedKernel {
            kernel: self.kernel.clone(),
            check: Arc::clone(&self.check),
            _params: PhantomData,
        }
    }
}

impl<P: KernelParams> std::fmt::Debug for TypedKernel<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedKernel")
            .field("kernel", &self.kernel)
            .field("params", &P::sizes())
            .finish()
    }
}

impl KernelHandle {
    /// This kernel with the parameter list `P` and the hand-written bounds check `bounds`,
    /// ready for safe launches. Where the driver reports parameter sizes (CUDA 12.4 and later),
    /// a list that does not match `P`'s sizes is an `Err`. For the usual shapes of a kernel's
    /// accesses, [`checked`](Self::checked) takes ready-made rules instead of a closure.
    ///
    /// # Safety
    ///
    /// For every launch through the returned value (any stream, any configuration that the
    /// launch's own checks accept, any argument values):
    ///
    /// - The kernel's parameters are exactly `P`, in order: each scalar parameter of that
    ///   scalar type, each [`Buffer`](crate::code::Buffer) a pointer that the kernel uses as a
    ///   device address, and each [`Elements<T>`](crate::code::Elements) a pointer to `T` (a
    ///   `T*` in the kernel, read and written as `T` values, never as a wider or more aligned
    ///   type), and each [`TensorMap<T>`](crate::code::TensorMap) a `const __grid_constant__
    ///   CUtensorMap` used only as the tensor operand of tensor-memory-access instructions
    ///   (`cp.async.bulk.tensor`, `prefetch.tensor`), never to read its bytes otherwise.
    ///   Nothing checks the element type: the driver reports only sizes.
    /// - Whenever `bounds(args, config)` returns `Ok`, the kernel reads and writes device
    ///   memory only inside the `size()` bytes of each [`Buffer`](crate::code::Buffer) argument
    ///   and the `len()` elements of each [`Elements<T>`](crate::code::Elements) argument
    ///   (and through each tensor map only what the map describes, which the hardware keeps
    ///   to the map's buffer), or memory it owns itself, and does nothing else that is undefined behaviour on the device (no
    ///   out-of-bounds shared-memory access, no trap-free infinite loop that is relied on to
    ///   end, no use of a buffer's memory after the kernel returns).
    pub unsafe fn typed<P: KernelParams>(&self, bounds: BoundsCheck<P>) -> Result<TypedKernel<P>> {
        // SAFETY: the caller's promise is `checked`'s, with `bounds` as the only check.
        unsafe { self.checked(check::custom(bounds)) }
    }

    /// This kernel with the parameter list `P` and the bounds check `check`, built from the
    /// ready-made rules of [`crate::code::check`] (and hand-written parts, [`check::custom`]),
    /// ready for safe launches: [`typed`](Self::typed) without a hand-written closure. A rule
    /// that names a parameter for what it is not is [`Error::BadCheck`]; where the driver
    /// reports parameter sizes, a list that does not match `P`'s is [`Error::ParamMismatch`].
    ///
    /// # Safety
    ///
    /// [`typed`](Self::typed)'s contract, with `check` in place of `bounds`. For every launch
    /// through the returned value:
    ///
    /// - the kernel's parameters are exactly `P`, in order, as [`typed`](Self::typed) states;
    /// - whenever `check` accepts the launch (every rule, and every [`check::custom`] part),
    ///   the kernel reads and writes device memory only inside the `len()` elements of each
    ///   [`Elements<T>`](crate::code::Elements) argument, the `size()` bytes of each
    ///   [`Buffer`](crate::code::Buffer) argument (and through each tensor map only what the
    ///   map describes), or memory it owns itself, and does nothing else that is undefined
    ///   behaviour on the device (no shared-memory access beyond its static shared memory and
    ///   the dynamic shared memory the launch gives, among the rest that `typed` lists).
    ///
    /// The rules compare sizes; they do not read the kernel's code. The second point holds
    /// when the kernel touches each parameter a rule names only in the shape that rule's
    /// function documents ([`check::per_thread`]: element `i` only for `i < n`;
    /// [`check::per_block`]: only the element of its own block; [`check::elements_per_thread`]:
    /// at most `k` elements per thread, all below `k` times the launch's threads;
    /// [`check::shared_per_thread`]: at most that many bytes of dynamic shared memory per
    /// thread of its block), and touches every parameter no rule names only within its length
    /// whatever the launch (or as a [`check::custom`] part of `check` guarantees).
    pub unsafe fn checked<P: KernelParams>(&self, check: Check<P>) -> Result<TypedKernel<P>> {
        check
            .validate()
            .map_err(|error| error.for_kernel(self.name()))?;
        if let Some(sizes) = self.param_sizes() {
            let expected = P::sizes();
            if *sizes != expected {
                return Err(Error::ParamMismatch {
                    kernel: self.name().to_owned(),
                    expected: sizes.to_vec(),
                    found: expected,
                });
            }
        }
        Ok(TypedKernel {
            kernel: self.clone(),
            check: Arc::new(check),
            _params: PhantomData,
        })
    }

    /// Launches the kernel with `args`, without a bounds check. The configuration is still
    /// checked, and the buffers are still reported as used on `stream`.
    ///
    /// # Safety
    ///
    /// The kernel's parameters are exactly `P`, in order, as [`typed`](Self::typed) states it
    /// (an [`Elements<T>`](crate::code::Elements) is a `T*`), and with these arguments and this
    /// configuration the kernel reads and writes device memory only inside the `size()` bytes
    /// of each [`Buffer`](crate::code::Buffer) argument and the `len()` elements of each
    /// `Elements<T>` argument (or memory it owns), with no other undefined behaviour on the
    /// device.
    pub unsafe fn launch_unchecked<P: KernelParams>(
        &self,
        stream: &StreamHandle,
        config: &LaunchConfig,
        args: P::Args<'_>,
    ) -> Result<()> {
        launch::<P>(self, stream, config, None, &args)
    }
}

impl<P: KernelParams> TypedKernel<P> {
    /// The kernel.
    pub fn kernel(&self) -> &KernelHandle {
        &self.kernel
    }

    /// Runs the bounds check; a refusal names this kernel.
    #[inline]
    fn run_check(&self, args: &P::Args<'_>, config: &LaunchConfig) -> Result<()> {
        self.check
            .run(args, config)
            .map_err(|error| error.for_kernel(self.kernel.name()))
    }

    /// Launches the kernel on `stream` (`cuLaunchKernel`): the configuration and the bounds
    /// check run first, and every buffer argument is reported as used on `stream`, so no
    /// free overtakes the kernel.
    pub fn launch(
        &self,
        stream: &StreamHandle,
        config: &LaunchConfig,
        args: P::Args<'_>,
    ) -> Result<()> {
        self.run_check(&args, config)?;
        launch::<P>(&self.kernel, stream, config, None, &args)
    }

    /// The checks of a launch on device `ordinal`, without launching (for graph nodes), with
    /// `check_buffer` as the reach check of each buffer argument.
    pub(crate) fn check_launch<'a>(
        &self,
        config: &LaunchConfig,
        args: &P::Args<'a>,
        ordinal: usize,
        check_buffer: impl FnMut(&'a DevicePtrHandle) -> Result<()>,
    ) -> Result<()> {
        self.run_check(args, config)?;
        let (max_threads, max_shared) = self.kernel.launch_limits(ordinal)?;
        config.check(max_threads, max_shared)?;
        P::try_each_buffer(args, check_buffer)
    }

    /// A launch on a capture's private stream: checked and queued, but neither reported as a
    /// use nor noted in the library (the graph attaches both, and its launches report them).
    /// With `options`, every option is checked as for [`Self::launch_ex`] (a cooperative grid
    /// against the capture stream's device), and a programmatic event is refused
    /// ([`GraphRule::ProgrammaticEventInCapture`]).
    ///
    /// `Err` if it was refused before the driver call. Otherwise whether it was queued (into
    /// the capture) with the call's status, which can be an error after the queueing (a failed
    /// restore of the caller's context), so the caller attaches whatever was queued; and the
    /// multiprocessors a cooperative grid needs (0 if not cooperative).
    pub(crate) fn launch_captured(
        &self,
        stream: &StreamHandle,
        config: &LaunchConfig,
        options: Option<&LaunchOptions>,
        args: &P::Args<'_>,
    ) -> Result<(Queued, u32)> {
        self.run_check(args, config)?;
        if let Some(options) = options {
            if options.programmatic_event.is_some() {
                return Err(Error::GraphRule(GraphRule::ProgrammaticEventInCapture));
            }
            if options.programmatic_serialization {
                crate::driver::load::require_version(
                    crate::driver::load::newer_uses::CAPTURED_PROGRAMMATIC,
                )?;
            }
            options.check(config)?;
        }
        queue::<P>(&self.kernel, stream, config, options, args)
            .map(|(queued, _, cooperative_sms)| (queued, cooperative_sms))
    }

    /// [`Self::launch`] with extra attributes (`cuLaunchKernelEx`): thread-block clusters, a
    /// launch priority, cooperative and programmatic dependent launches (see
    /// [`crate::code::launch_attributes`]). Every option is checked before the driver is
    /// called.
    pub fn launch_ex(
        &self,
        stream: &StreamHandle,
        config: &LaunchConfig,
        options: &LaunchOptions,
        args: P::Args<'_>,
    ) -> Result<()> {
        self.run_check(&args, config)?;
        options.check(config)?;
        launch::<P>(&self.kernel, stream, config, Some(options), &args)
    }
}

/// The launch itself: checks, the driver call in the stream's context, then the bookkeeping.
fn launch<P: KernelParams>(
    kernel: &KernelHandle,
    stream: &StreamHandle,
    config: &LaunchConfig,
    options: Option<&LaunchOptions>,
    args: &P::Args<'_>,
) -> Result<()> {
    stream.refuse_if_captured()?;
    let (queued, context, _) = queue::<P>(kernel, stream, config, options, args)?;
    // Once the kernel is queued, every use is reported whatever else fails.
    queued.then(|| {
        let uses = P::note_uses(args, stream);
        // The stream's own context handle when it has one (a green context's is not
        // registered, so only the stream's record can keep it).
        let noted = kernel
            .library()
            .note_launch(context, || match stream.context() {
                Some(own) if own.as_cu() == context => Ok(own.clone()),
                _ => ContextHandle::owning(context),
            });
        uses.and(noted)
    })
}

/// Checks the configuration and queues the launch in the stream's context; returns whether it
/// was queued, that context, and the multiprocessors a cooperative grid needs (0 if none). The
/// caller checks the stream's capture state first (a capture's own private stream is the one
/// stream where capturing is expected).
#[inline]
fn queue<P: KernelParams>(
    kernel: &KernelHandle,
    stream: &StreamHandle,
    config: &LaunchConfig,
    options: Option<&LaunchOptions>,
    args: &P::Args<'_>,
) -> Result<(Queued, CUcontext, u32)> {
    crate::code::params::refuse_on_streams::<P>(args)?;
    let ordinal = stream.device_ordinal()?;
    let (max_threads, max_shared) = kernel.launch_limits(ordinal)?;
    config.check(max_threads, max_shared)?;
    let cooperative_sms = match options {
        Some(options) => options.check_on_device(kernel, stream, config, ordinal)?,
        None => 0,
    };
    // Held until the launch is queued (memory of other devices' pools only; empty otherwise,
    // with no allocation).
    let mut reach = Vec::new();
    P::try_each_buffer(args, |buffer| {
        if let Some(guard) = buffer.held_reach_on(stream, ordinal)? {
            reach.push(guard);
        }
        Ok(())
    })?;
    // The launch records its programmatic event: a completion's waiter polling the event for
    // an earlier record hands it to a notifier first, and the record, made while the guard
    // lives (until the launch is queued), leaves the event without stamps.
    let other_record = options
        .and_then(|options| options.programmatic_event.as_ref())
        .map(|programmatic| programmatic.event.before_other_record());
    let function = kernel.as_cu() as CUfunction;
    // A `CUkernel` launches in the current context: the stream's, made current for the call.
    let mut context: CUcontext = stream
        .context()
        .as_ref()
        .map_or(std::ptr::null_mut(), ContextHandle::as_cu);
    let queued = stream.queue_bound(|raw_stream| {
        if context.is_null() {
            // A stream without a context record runs in the current one.
            context = current_raw()?;
        }
        P::with_pointers(args, |params| match options {
            // SAFETY: the kernel is alive (its handle keeps the library loaded); `params`
            // points to one pointer per parameter, each to that parameter's bytes, alive for
            // the call; the caller vouched that the kernel's accesses stay in bounds.
            None => {
                let raw = config.raw(raw_stream, &mut []);
                // SAFETY: the kernel is alive (its handle keeps the library loaded); `params`
                // points to one pointer per parameter, each to that parameter's bytes, alive
                // for the call; the caller vouched that the kernel's accesses stay in bounds.
                unsafe {
                    driver!(cuLaunchKernel(
                        function,
                        raw.gridDimX,
                        raw.gridDimY,
                        raw.gridDimZ,
                        raw.blockDimX,
                        raw.blockDimY,
                        raw.blockDimZ,
                        raw.sharedMemBytes,
                        raw.hStream,
                        params,
                        std::ptr::null_mut(),
                    ))
                }
            }
            Some(options) => {
                options.check_in_context(context)?;
                let (mut attributes, count) = options.attributes();
                let raw = config.raw(raw_stream, &mut attributes[..count as usize]);
                // SAFETY: as for `cuLaunchKernel`; `raw` and its attributes live for the call.
                unsafe {
                    driver!(cuLaunchKernelEx(
                        &raw,
                        function,
                        params,
                        std::ptr::null_mut()
                    ))
                }
            }
        })
    });
    drop(reach);
    drop(other_record);
    Ok((queued, context, cooperative_sms))
}
