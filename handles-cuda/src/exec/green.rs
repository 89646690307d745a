//! Green contexts (`CUgreenCtx`): a share of a device's SMs, with streams of its own.
//!
//! The owner graph: a [`GreenContextHandle`] owns the green context; its [`GreenContextHandle::context`]
//! is a `ContextHandle` that keeps the green context alive, and the streams and events made
//! in it keep that context handle, so work queued in the green context keeps it alive. Where
//! the driver or the device has no green contexts, the constructors return an `Err`.

use cudarc::driver::sys::{self, CUgreenCtx};
use handles_core::ResourceHandle;

use crate::driver::call::{deleter_status, driver, out};
use crate::driver::load::{self, ensure_loaded, newer, probed};
use crate::error::{Error, Result};
use crate::exec::context::{Context, ContextHandle};
use crate::exec::stream::{Stream, StreamHandle};

/// A green context: `sm_count` SMs of device `device`.
///
/// Ownership: [`GreenContextHandle::create`] owns it and destroys it (`cuGreenCtxDestroy`)
/// when the last clone drops, which is after every stream and event made in it (they keep its
/// context handle, which keeps it). Keeps alive: nothing.
///
/// That last drop blocks until the green context's queued work has run (`cuCtxSynchronize`
/// before the destroy): dropping it while that work waits for something the dropping thread
/// would do afterwards (a host function waiting for a flag, say) never returns.
#[derive(ResourceHandle)]
#[handle(raw = CUgreenCtx, accessor = as_cu, delete = destroy_green)]
pub struct GreenContext {
    /// The device ordinal.
    #[handle(copy)]
    pub device: usize,
    /// The SMs the green context may use.
    #[handle(copy)]
    pub sm_count: u32,
}
// SAFETY: the CUDA driver API lets green contexts be used and destroyed from any thread.
unsafe impl handles_core::ThreadSafe for GreenContext {}

fn destroy_green(raw: CUgreenCtx, _: &GreenContext) -> Result<()> {
    // Its streams are destroyed, but `cuStreamDestroy` returns before their work has run
    // (a last free, say): the green context is destroyed only after that work.
    // SAFETY: the green context is alive; `context` is a valid out-pointer.
    let context = out(|context| unsafe { probed!(cuCtxFromGreenCtx(context, raw)) });
    let drained = context.and_then(|context| {
        // SAFETY: the green context's context is alive and current for the call.
        crate::driver::current::in_context(context, || unsafe { driver!(cuCtxSynchronize()) })
    });
    deleter_status(drained)?;
    // SAFETY: the handle owns `raw`; every stream made in it is gone (they keep it alive) and
    // their work has completed.
    deleter_status(unsafe { probed!(cuGreenCtxDestroy(raw)) })
}

/// An empty SM resource, to be filled by the driver.
fn empty_resource() -> sys::CUdevResource {
    // SAFETY: all zero bytes are a valid resource: type 0 is `CU_DEV_RESOURCE_TYPE_INVALID`,
    // the padding is bytes and the union holds integers.
    unsafe { std::mem::zeroed() }
}

impl GreenContextHandle {
    /// A green context of device `ordinal` with at least `sm_count` SMs: the device's SMs are
    /// split into groups of `sm_count` (`cuDevSmResourceSplitByCount`, which rounds up to what
    /// the architecture requires) and the first group becomes the green context
    /// (`cuDevResourceGenerateDesc`, `cuGreenCtxCreate`).
    pub fn create(ordinal: usize, sm_count: u32) -> Result<Self> {
        ensure_loaded()?;
        newer::cuGreenCtxCreate.require()?;
        if sm_count == 0 {
            return Err(Error::ZeroSize {
                what: "a green context needs at least one SM",
            });
        }
        let device = load::device(ordinal)?;
        let mut all = empty_resource();
        // SAFETY: `all` is a valid out-pointer for one resource of the type asked for.
        unsafe {
            probed!(cuDeviceGetDevResource(
                device,
                &mut all,
                sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM
            ))
        }?;
        // SAFETY: the driver filled an SM resource, whose union member is `sm`.
        let available = unsafe { all.__bindgen_anon_1.sm.smCount };
        if sm_count > available {
            return Err(Error::SmCount {
                device: ordinal,
                requested: sm_count,
                available,
            });
        }
        let (mut group, mut groups, mut rest) = (empty_resource(), 1u32, empty_resource());
        // SAFETY: room for one group and the remainder; `all` is the device's SM resource.
        unsafe {
            probed!(cuDevSmResourceSplitByCount(
                &mut group,
                &mut groups,
                &all,
                &mut rest,
                0,
                sm_count
            ))
        }?;
        if groups == 0 {
            return Err(Error::SmCount {
                device: ordinal,
                requested: sm_count,
                available,
            });
        }
        // SAFETY: the driver filled an SM resource.
        let granted = unsafe { group.__bindgen_anon_1.sm.smCount };
        let desc = out(|desc| {
            // SAFETY: one valid resource; `desc` is a valid out-pointer.
            unsafe { probed!(cuDevResourceGenerateDesc(desc, &mut group, 1)) }
        })?;
        let raw = out(|raw| {
            // SAFETY: `desc` was just generated for `device`; `raw` is a valid out-pointer.
            unsafe {
                probed!(cuGreenCtxCreate(
                    raw,
                    desc,
                    device,
                    sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32
                ))
            }
        })?;
        let record = GreenContext {
            device: ordinal,
            sm_count: granted,
        };
        // SAFETY: a fresh green context owned by nobody else; `destroy_green` destroys it once.
        Ok(unsafe { GreenContextHandle::from_raw(raw, record) })
    }

    /// The green context as a `ContextHandle` (`cuCtxFromGreenCtx`) that keeps it alive: make
    /// streams, events and allocations in it as in any context.
    pub fn context(&self) -> Result<ContextHandle> {
        let raw = out(|raw| {
            // SAFETY: the green context is alive; `raw` is a valid out-pointer.
            unsafe { probed!(cuCtxFromGreenCtx(raw, self.as_cu())) }
        })?;
        // SAFETY: the context lives as long as its green context, which the with-owner handle
        // keeps alive; the handle never destroys the context itself.
        Ok(unsafe {
            ContextHandle::from_raw_with_owner(
                raw,
                Context::green_share(self.device(), self.sm_count()),
                self.clone(),
            )
        })
    }

    /// A stream of the green context (`cuGreenCtxStreamCreate`, non-blocking, as the driver
    /// requires), which keeps the green context alive.
    pub fn create_stream(&self, priority: i32) -> Result<StreamHandle> {
        let context = self.context()?;
        let raw = out(|raw| {
            // SAFETY: the green context is alive; `raw` is a valid out-pointer.
            unsafe {
                probed!(cuGreenCtxStreamCreate(
                    raw,
                    self.as_cu(),
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                    priority
                ))
            }
        })?;
        let record = Stream {
            context: Some(context),
        };
        // SAFETY: a fresh stream owned by nobody else, destroyed by the stream deleter; its
        // record keeps the green context alive through the context handle.
        Ok(unsafe { StreamHandle::from_raw(raw, record) })
    }
}
