//! What every launch of an executable graph checks and reports, worked out once per
//! instantiation or update instead of at each launch: each buffer once (a graph of many nodes
//! over a few buffers lists a buffer per node that uses it), each kernel's library once, each
//! host node's closure once. A launch then checks the reach of each buffer whose reach can
//! change, queues the graph, and reports each buffer's use on its stream and the launch's
//! contexts in each library and closure, exactly as when it walked the whole list; recording
//! one use twice on one stream, or noting one context twice, added nothing.
//!
//! The notes of contexts (a library's launches, a host node's, a synchronous buffer's uses)
//! are only ever added to, so once every one has been made for a stream of one context, a
//! later launch on a stream of that context has nothing to add: the plan remembers that
//! context ([`LaunchPlan::noted_for`]) and such a launch skips them. Uses that are recorded
//! per stream (markers of stream-ordered and host-visible memory) are recorded at every
//! launch.
//!
//! Identity is the handle's box, not the raw value: a view of a buffer may share its start,
//! and is checked and reported on its own.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::code::library::LibraryHandle;
use crate::graph::book::Attachment;
use crate::graph::host::HostFunctionHandle;
use crate::memory::device_ptr::DevicePtrHandle;

/// The distinct handles of an attachment list that a launch checks or reports.
pub(crate) struct LaunchPlan {
    /// The buffers whose reach from the graph's device may change: checked at every launch.
    pub(crate) checked: Vec<DevicePtrHandle>,
    /// The buffers whose use is recorded on the launch's stream at every launch.
    pub(crate) recorded: Vec<DevicePtrHandle>,
    /// The buffers whose use only notes the stream's context.
    pub(crate) noted: Vec<DevicePtrHandle>,
    pub(crate) libraries: Vec<LibraryHandle>,
    pub(crate) hosts: Vec<HostFunctionHandle>,
    /// The most multiprocessors a cooperative node's grid needs to be resident at once; 0
    /// without cooperative nodes.
    pub(crate) cooperative_sms: u32,
    /// The raw context of the streams for which every note of a context (`noted`, the
    /// libraries, the host nodes) has been made by a launch that reported no error; 0 until
    /// then.
    noted_for: AtomicUsize,
}

/// Pushes `handle` unless a clone of the same box is there already. Kept sorted by raw value,
/// so that only the few entries with the same raw value are compared box by box.
fn insert<H: std::ops::Deref<Target = handles_core::Handle<R>> + Clone, R>(
    list: &mut Vec<H>,
    handle: &H,
) where
    R: handles_core::Resource,
{
    let raw = handle.as_intptr();
    let at = list.partition_point(|known| known.as_intptr() < raw);
    let same_raw = list[at..]
        .iter()
        .take_while(|known| known.as_intptr() == raw);
    if same_raw.clone().any(|known| known.ptr_eq(handle)) {
        return;
    }
    list.insert(at, handle.clone());
}

impl LaunchPlan {
    /// The plan of `attachments`, for a graph whose nodes run on device `ordinal`.
    pub(crate) fn of(attachments: &[Attachment], ordinal: usize) -> Self {
        let mut buffers = Vec::new();
        let mut plan = LaunchPlan {
            checked: Vec::new(),
            recorded: Vec::new(),
            noted: Vec::new(),
            libraries: Vec::new(),
            hosts: Vec::new(),
            cooperative_sms: 0,
            noted_for: AtomicUsize::new(0),
        };
        for attachment in attachments {
            match attachment {
                Attachment::Buffer(buffer) => insert(&mut buffers, buffer),
                Attachment::Kernel(kernel) => insert(&mut plan.libraries, kernel.library()),
                Attachment::Host(function) => insert(&mut plan.hosts, function),
                Attachment::Cooperative(sms) => {
                    plan.cooperative_sms = plan.cooperative_sms.max(*sms);
                }
                // Kept alive by the list; nothing to check or report at a launch.
                Attachment::Event(_) => {}
            }
        }
        for buffer in &buffers {
            if !buffer.reach_is_fixed(ordinal) {
                plan.checked.push(buffer.clone());
            }
            match buffer.use_is_context_note() {
                true => plan.noted.push(buffer.clone()),
                false => plan.recorded.push(buffer.clone()),
            }
        }
        plan
    }

    /// Whether every note of a context has been made for streams of `context` (a raw
    /// context; `None` for a stream whose context is not known, never noted as made).
    pub(crate) fn noted_for(&self, context: Option<usize>) -> bool {
        context.is_some_and(|context| self.noted_for.load(Ordering::Acquire) == context)
    }

    /// Every note of a context has been made for streams of `context`, without an error.
    pub(crate) fn mark_noted_for(&self, context: Option<usize>) {
        if let Some(context) = context {
            self.noted_for.store(context, Ordering::Release);
        }
    }
}
