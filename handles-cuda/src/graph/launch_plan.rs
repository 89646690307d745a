//! What every launch of an executable graph checks and reports, worked out once per
//! instantiation or update instead of at each launch: each buffer once (a graph of many nodes
//! over a few buffers lists a buffer per node that uses it), each kernel's library once, each
//! host node's closure once. A launch then checks each buffer's reach, queues the graph, and
//! reports each buffer's use on its stream and the launch's contexts in each library and
//! closure, exactly as when it walked the whole list; recording one use twice on one stream,
//! or noting one context twice, added nothing.
//!
//! Identity is the handle's box, not the raw value: a view of a buffer may share its start,
//! and is checked and reported on its own.

use crate::code::library::LibraryHandle;
use crate::graph::book::Attachment;
use crate::graph::host::HostFunctionHandle;
use crate::memory::device_ptr::DevicePtrHandle;

/// The distinct handles of an attachment list that a launch checks or reports.
pub(crate) struct LaunchPlan {
    pub(crate) buffers: Vec<DevicePtrHandle>,
    pub(crate) libraries: Vec<LibraryHandle>,
    pub(crate) hosts: Vec<HostFunctionHandle>,
    /// The most multiprocessors a cooperative node's grid needs to be resident at once; 0
    /// without cooperative nodes.
    pub(crate) cooperative_sms: u32,
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
    /// The plan of `attachments`.
    pub(crate) fn of(attachments: &[Attachment]) -> Self {
        let mut plan = LaunchPlan {
            buffers: Vec::new(),
            libraries: Vec::new(),
            hosts: Vec::new(),
            cooperative_sms: 0,
        };
        for attachment in attachments {
            match attachment {
                Attachment::Buffer(buffer) => insert(&mut plan.buffers, buffer),
                Attachment::Kernel(kernel) => insert(&mut plan.libraries, kernel.library()),
                Attachment::Host(function) => insert(&mut plan.hosts, function),
                Attachment::Cooperative(sms) => {
                    plan.cooperative_sms = plan.cooperative_sms.max(*sms);
                }
                // Kept alive by the list; nothing to check or report at a launch.
                Attachment::Event(_) => {}
            }
        }
        plan
    }
}
