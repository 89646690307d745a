//! Child-graph nodes (`cuGraphAddChildGraphNode`) and the DOT dump of a graph
//! (`cuGraphDebugDotPrint`).
//!
//! The driver clones the child graph when the node is added: later nodes of the child do not
//! reach the parent. So the parent attaches what the child's nodes reference *at that moment*
//! (a copy of the child's attachments, taken under both graphs' locks, so no node can be
//! added to the child between the copy and the clone).

use std::path::Path;
use std::sync::atomic::Ordering;

use crate::driver::call::driver;
use crate::error::{Error, Result};
use crate::graph::nodes::{GraphHandle, GraphNode};
use crate::sync::lock;

/// What `cuGraphDebugDotPrint` writes besides the topology (`CUgraphDebugDot_flags`); combine
/// them with `|`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DotFlags(u32);

impl DotFlags {
    /// The topology only.
    pub const NONE: DotFlags = DotFlags(0);
    /// Every node's parameters (`CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE`).
    pub const VERBOSE: DotFlags = DotFlags(1);
    /// Kernel nodes' parameters.
    pub const KERNEL_NODE_PARAMS: DotFlags = DotFlags(1 << 2);
    /// Memcpy nodes' parameters.
    pub const MEMCPY_NODE_PARAMS: DotFlags = DotFlags(1 << 3);
    /// Memset nodes' parameters.
    pub const MEMSET_NODE_PARAMS: DotFlags = DotFlags(1 << 4);
    /// The handles of nodes and graphs.
    pub const HANDLES: DotFlags = DotFlags(1 << 10);
    /// Conditional nodes' parameters.
    pub const CONDITIONAL_NODE_PARAMS: DotFlags = DotFlags(1 << 15);

    /// The driver's bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl std::ops::BitOr for DotFlags {
    type Output = DotFlags;
    fn bitor(self, other: DotFlags) -> DotFlags {
        DotFlags(self.0 | other.0)
    }
}

impl GraphHandle {
    /// Adds a node that runs a copy of `child` (`cuGraphAddChildGraphNode`), after
    /// `dependencies`. The driver copies `child` now; this graph keeps what `child`'s nodes
    /// reference now (nodes added to `child` later are not in the copy, and are not kept).
    /// A child with a conditional node is refused (the driver cannot copy one), and so is, in
    /// a conditional body, a child holding a host or event node.
    pub fn add_child_graph_node(
        &self,
        dependencies: &[GraphNode],
        child: &GraphHandle,
    ) -> Result<GraphNode> {
        // A body belongs to its conditional node: copied into another graph, its kernels could
        // set a handle of a graph that copy does not run in.
        child.refuse_body_alone("a child graph")?;
        if child.record().has_conditional.load(Ordering::Relaxed) {
            return Err(Error::ConditionalInChild);
        }
        if child.has_memory_nodes() {
            return Err(Error::GraphRule(crate::error::GraphRule::MemoryInChild));
        }
        let forbidden = child.record().not_for_bodies.load(Ordering::Relaxed);
        if forbidden {
            self.refuse_in_body("a child graph with host or event nodes")?;
        }
        let raw_dependencies = self.check_dependencies(dependencies)?;
        let (home, child_home) = (self.home(), child.home());
        // Both locks, always in the order of the graphs' ids (no deadlock between two threads
        // adding each graph to the other), or one when both graphs keep their attachments in
        // the same outermost graph.
        let same = std::ptr::eq(home.record(), child_home.record());
        let (first, second) = if home.id() <= child_home.id() {
            (home, child_home)
        } else {
            (child_home, home)
        };
        let mut first_lock = lock(&first.record().attachments);
        let mut second_lock = (!same).then(|| lock(&second.record().attachments));
        let copied = match &second_lock {
            Some(second) if home.id() <= child_home.id() => second.to_vec(),
            _ => first_lock.to_vec(),
        };
        let mut node = std::ptr::null_mut();
        // SAFETY: both graphs are alive (their handles are borrowed); `raw_dependencies` are
        // nodes of this graph (checked by id); the driver clones `child` during the call.
        unsafe {
            driver!(cuGraphAddChildGraphNode(
                &mut node,
                self.as_cu(),
                raw_dependencies.as_ptr(),
                raw_dependencies.len(),
                child.as_cu()
            ))
        }?;
        let parent = match &mut second_lock {
            Some(second) if home.id() > child_home.id() => second,
            _ => &mut first_lock,
        };
        parent.extend(copied);
        // The node joins this graph's record of dependencies, so that the rules of graph-owned
        // memory see through it (its own attachments are the child's, not a node's span).
        let keys: Vec<usize> = raw_dependencies.iter().map(|&node| node as usize).collect();
        lock(&self.record().book).added(node, &keys, 0, 0, &[]);
        drop((first_lock, second_lock));
        if forbidden {
            self.record().not_for_bodies.store(true, Ordering::Relaxed);
        }
        Ok(GraphNode {
            raw: node,
            graph: self.id(),
        })
    }

    /// Writes the graph in Graphviz DOT form to the file at `path` (`cuGraphDebugDotPrint`),
    /// with what `flags` asks for.
    pub fn debug_dot(&self, path: impl AsRef<Path>, flags: DotFlags) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(path.as_ref().as_os_str().as_bytes()).map_err(|_| {
            Error::InteriorNul {
                what: format!("the DOT file's path {:?}", path.as_ref()),
            }
        })?;
        // The lock: no node is added while the driver walks the graph.
        let _attached = lock(&self.home().record().attachments);
        // SAFETY: the graph is alive; `path` is a NUL-terminated string that outlives the call.
        unsafe {
            driver!(cuGraphDebugDotPrint(
                self.as_cu(),
                path.as_ptr(),
                flags.bits()
            ))
        }
    }
}
