//! Host nodes of graphs: a closure that every launch of an executable graph calls, on a driver
//! thread, when the node's dependencies have run (`cuGraphAddHostNode`).
//!
//! `GraphHandle::add_host_node` (in `nodes.rs`) adds one. The closure lives in a [`HostFunction`] resource that the graph attaches like a buffer, so
//! the graph and each executable graph made from it keep it. Every launch notes its context in
//! the resource, and the deleter waits for those contexts before it frees the closure: no launch
//! that is still running can call a freed closure, whichever handle is dropped first. The
//! calls themselves follow `StreamHandle::launch_host`'s rules: no CUDA inside, and a panic is
//! caught and reported at every launch.

use std::ffi::c_void;

use handles_core::ResourceHandle;

use crate::error::Result;
use crate::exec::host::run_caught;
use crate::order::contexts_used::ContextsUsed;

/// The closure of a host node.
pub(crate) type Repeated = Box<dyn Fn() + Send + Sync + 'static>;

/// A closure that graph host nodes call once per launch: the raw value is the address of the
/// boxed closure, which the deleter frees after every context it was launched in has finished
/// its work (if that wait fails, the closure is leaked and the failure reported).
#[derive(ResourceHandle)]
#[handle(raw = usize, accessor = address, delete = release_function)]
pub struct HostFunction {
    /// The contexts launches of graphs with this node ran in.
    pub(crate) launched_in: ContextsUsed,
}
// SAFETY: the closure is `Send + Sync`; the record is a set of contexts behind its own lock.
unsafe impl handles_core::ThreadSafe for HostFunction {}

fn release_function(raw: usize, function: &HostFunction) -> Result<()> {
    function
        .launched_in
        .release_after_all("HostFunction", raw as isize, move |waited| {
            // A failed wait leaks the closure (a launch may still call it).
            waited?;
            // SAFETY: `raw` is the box `HostFunctionHandle::new` leaked, owned by this handle
            // alone, which is gone; every launch that could call it has finished (the wait
            // before this release), and the release runs once.
            drop(unsafe { Box::from_raw(raw as *mut Repeated) });
            Ok(())
        })
}

/// The host function of a host node: calls the closure; unwinding stops here.
///
/// # Safety
///
/// `data` is the raw value of a live [`HostFunctionHandle`] (the address of its `Repeated`).
pub(crate) unsafe extern "C" fn run_repeated(data: *mut c_void) {
    // SAFETY: the caller's contract: `data` points to a live `Repeated`.
    let call: &Repeated = unsafe { &*data.cast::<Repeated>() };
    run_caught("graph host node", data, call);
}

impl HostFunctionHandle {
    pub(crate) fn new(call: Repeated) -> Self {
        let raw = Box::into_raw(Box::new(call)) as usize;
        let record = HostFunction {
            launched_in: ContextsUsed::new(),
        };
        // SAFETY: `raw` is a fresh box owned by nobody else; `release_function` frees it once.
        unsafe { HostFunctionHandle::from_raw(raw, record) }
    }
}
