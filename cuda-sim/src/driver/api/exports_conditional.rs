//! The exported conditional-node, child-graph and DOT functions (see `conditional`).
//!
//! # Safety
//!
//! As for `exports`: pointer arguments follow the driver API's contract.

use std::ffi::{CStr, c_char, c_uint, c_void};

use crate::api::exports_graphs::{add_node, dependencies};
use crate::base::abi::{get, put};
use crate::base::errors::{INVALID_VALUE, NOT_SUPPORTED, OPERATING_SYSTEM};
use crate::base::types::*;
use crate::resources::conditional::GraphNodeParams;
use crate::resources::work::NODE_CONDITIONAL;
use crate::with_sim;

export_fns! {
    fn cuGraphConditionalHandleCreate(handle: *mut u64, graph: Raw, context: Raw, default: c_uint, flags: c_uint) {
        if handle.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(|sim| sim.create_conditional(graph, context, default, flags))?;
        put(handle, raw)
    }

    fn cuGraphAddNode_v2(
        node: *mut Raw,
        graph: Raw,
        deps: *const Raw,
        edge_data: *const c_void,
        count: usize,
        params: *mut GraphNodeParams
    ) {
        // Only conditional nodes come through here; every edge is a default one.
        if node.is_null() || !edge_data.is_null() {
            return Err(if node.is_null() { INVALID_VALUE } else { NOT_SUPPORTED });
        }
        let p = get(params.cast_const())?;
        if p.kind != NODE_CONDITIONAL {
            return Err(NOT_SUPPORTED);
        }
        let deps = dependencies(deps, count)?;
        let (raw, bodies) = with_sim(|sim| sim.add_conditional_node(graph, &deps, &p.conditional))?;
        // SAFETY: `params` is a valid, writable `CUgraphNodeParams` by the API's contract (read
        // above); the driver writes the body array's address into its conditional member.
        put(unsafe { &raw mut (*params).conditional.bodies }, bodies)?;
        put(node, raw)
    }

    fn cuGraphAddChildGraphNode(node: *mut Raw, graph: Raw, deps: *const Raw, count: usize, child: Raw) {
        add_node(node, graph, deps, count, |sim| sim.child_graph_op(child))
    }

    fn cuGraphDebugDotPrint(graph: Raw, path: *const c_char, _flags: c_uint) {
        if path.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: a NUL-terminated path, by the API's contract.
        let path = unsafe { CStr::from_ptr(path) }.to_string_lossy().into_owned();
        let text = with_sim(|sim| sim.dot(graph))?;
        std::fs::write(path, text).map_err(|_| OPERATING_SYSTEM)
    }
}
