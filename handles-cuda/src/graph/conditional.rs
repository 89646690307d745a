//! Conditional nodes (`cuGraphAddNode` with `CU_GRAPH_NODE_TYPE_CONDITIONAL`): if, if/else,
//! while and switch, each reading a [`ConditionalHandle`] that the graph's kernels set.
//!
//! The driver creates a conditional node's body graphs and owns them: they live as long as
//! the node, so as long as the graph that holds it, and are destroyed with it. Each body is
//! handed out as a [`GraphHandle`] that is never destroyed by us and that keeps the
//! *outermost* graph alive (so the raw body stays valid while the handle lives). Bodies are
//! built with the ordinary node methods; what their nodes reference is attached to the
//! outermost graph ([`GraphHandle::home`]), so that its instantiation, launches and updates
//! keep it exactly as they keep their own nodes'. Nodes the driver forbids in bodies (host
//! and event nodes, and child graphs holding one) are refused before the driver is called.
//!
//! A handle is bound to the graph it was made on: only that graph, or a body nested in it,
//! can hold the conditional node that reads it (one node per handle), and only kernel nodes of
//! the same outermost graph can take it as an argument.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys::{self, CUgraph};

use crate::code::conditional::ConditionalHandle;
use crate::code::params::KernelParams;
use crate::driver::call::out;
use crate::driver::load::{probed, require_version};
use crate::error::{Error, GraphRule, Result};
use crate::graph::nodes::{Body, Graph, GraphHandle, GraphNode, NEXT_GRAPH_ID};

/// The CUDA version that brought if/else and switch nodes (12.8); if and while came with
/// conditional nodes themselves (12.3).
const IF_ELSE_AND_SWITCH: (&str, i32) = ("a conditional node of type if/else or switch", 12080);

/// The most bodies a switch node may have here: each is a driver graph and a handle, made when
/// the node is added, so an absurd count would exhaust memory (the process would abort) rather
/// than fail. A switch reads one `u32`; real ones have a handful of cases.
pub const MAX_SWITCH_BODIES: usize = 1 << 16;

/// The kind of a conditional node, with the bodies it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionalKind {
    /// One body, run once when the condition is non-zero.
    If,
    /// Two bodies: the first runs when the condition is non-zero, the second when it is zero
    /// (CUDA 12.8).
    IfElse,
    /// One body, run again and again as long as the condition is non-zero when it is
    /// evaluated (before each run): a kernel of the body ends the loop by setting it to 0.
    While,
    /// `n` bodies (at least one, at most [`MAX_SWITCH_BODIES`]): body `i` runs when the
    /// condition is `i`; none runs when it is `n` or more (CUDA 12.8).
    Switch(u32),
}

/// A conditional node and its body graphs, in the driver's order (see [`ConditionalKind`]).
#[derive(Debug)]
pub struct ConditionalNode {
    /// The node, to name as a dependency of later nodes.
    pub node: GraphNode,
    /// The body graphs, to add nodes to.
    pub bodies: Vec<GraphHandle>,
}

impl GraphHandle {
    /// Creates a conditional handle on this graph (`cuGraphConditionalHandleCreate`), for a
    /// conditional node of this graph or of a body nested in it. With `Some(value)`, every
    /// launch starts with the condition at `value` (`CU_GRAPH_COND_ASSIGN_DEFAULT`); with
    /// `None`, it is undefined at a launch's start until a kernel sets it.
    pub fn create_conditional(&self, default: Option<u32>) -> Result<ConditionalHandle> {
        let (value, flags) = match default {
            Some(value) => (value, sys::CU_GRAPH_COND_ASSIGN_DEFAULT),
            None => (0, 0),
        };
        // SAFETY: the graph and its context are alive; `raw` is a valid out-pointer.
        let raw = out(|raw| unsafe {
            probed!(cuGraphConditionalHandleCreate(
                raw,
                self.as_cu(),
                self.context().as_cu(),
                value,
                flags
            ))
        })?;
        // A graph with a conditional handle is refused as a child graph, as one with a
        // conditional node is: a copy of it could carry a kernel that sets a handle no node of
        // the parent reads.
        self.record().has_conditional.store(true, Ordering::Relaxed);
        Ok(ConditionalHandle::new(
            raw,
            self.id(),
            self.home().id(),
            default,
        ))
    }

    /// Adds a conditional node of `kind` reading `handle`, after `dependencies`, and returns
    /// it with its body graphs. `handle` must have been made on this graph or on one that
    /// encloses it, and drives no other node.
    pub fn add_conditional_node(
        &self,
        dependencies: &[GraphNode],
        handle: &ConditionalHandle,
        kind: ConditionalKind,
    ) -> Result<ConditionalNode> {
        let (raw_kind, size) = match kind {
            ConditionalKind::If => (sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF, 1),
            ConditionalKind::IfElse => {
                require_version(IF_ELSE_AND_SWITCH)?;
                (sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF, 2)
            }
            ConditionalKind::While => {
                (sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE, 1)
            }
            ConditionalKind::Switch(0) => {
                return Err(Error::GraphRule(GraphRule::SwitchWithoutBodies));
            }
            ConditionalKind::Switch(n) if n as usize > MAX_SWITCH_BODIES => {
                return Err(Error::TooMany {
                    count: n as usize,
                    what: "bodies of a switch node",
                    max: MAX_SWITCH_BODIES,
                });
            }
            ConditionalKind::Switch(n) => {
                require_version(IF_ELSE_AND_SWITCH)?;
                (
                    sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_SWITCH,
                    n,
                )
            }
        };
        if handle.graph_id() != self.id() && !self.enclosing().contains(&handle.graph_id()) {
            return Err(Error::ForeignConditional {
                handle_graph: handle.graph_id(),
                graph: self.id(),
                place: "by a conditional node of a graph it does not enclose",
            });
        }
        handle.claim()?;
        let mut bodies_out: *mut CUgraph = std::ptr::null_mut();
        let context = self.context().as_cu();
        // Defined when the node runs: a default, or a kernel node of this graph that takes the
        // handle and that this node depends on (a setter elsewhere, or not before it, leaves the
        // first read undefined).
        let defined = std::cell::Cell::new(handle.default_value().is_some());
        let setters = handle.setters_in(self.id());
        let check = |book: &crate::graph::book::Book, keys: &[usize]| {
            if !defined.get() {
                defined.set(setters.iter().any(|&setter| book.reaches(keys, setter)));
            }
            Ok(())
        };
        let added = self.add_node_checked(
            dependencies,
            [],
            check,
            |node, deps| {
                // SAFETY: every field of the parameter struct is an integer, a pointer or an enum
                // whose zero is a valid value (a kernel node type): all-zero is a valid value.
                let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
                params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
                params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
                    handle: handle.as_cu(),
                    type_: raw_kind,
                    size,
                    phGraph_out: std::ptr::null_mut(),
                    ctx: context,
                };
                // SAFETY: the graph and its context are alive; `deps` are nodes of this graph
                // (checked by id); `params` is a conditional node's parameters, and the driver
                // writes the body array's address into it.
                unsafe {
                    probed!(cuGraphAddNode_v2(
                        node,
                        self.as_cu(),
                        deps.as_ptr(),
                        std::ptr::null(),
                        deps.len(),
                        &mut params
                    ))
                }?;
                // SAFETY: the driver filled the conditional member it was given.
                bodies_out = unsafe { params.__bindgen_anon_1.conditional.phGraph_out };
                Ok(())
            },
            |_| {},
        );
        let node = match added {
            Ok(node) => node,
            Err(error) => {
                handle.release();
                return Err(error);
            }
        };
        if bodies_out.is_null() {
            return Err(Error::NothingMade {
                what: "the driver returned no body graphs for the conditional node",
            });
        }
        self.record().has_conditional.store(true, Ordering::Relaxed);
        // The outermost graph's book lists the handles its nodes read and set, checked wherever
        // it becomes executable (a handle nothing defines, or one set but never read, is
        // refused there).
        handle.note_reader(defined.get());
        self.home().list_conditional(handle);
        let mut enclosing = self.enclosing().to_vec();
        enclosing.push(self.id());
        let bodies = (0..size as usize)
            .map(|i| {
                // SAFETY: the driver's array holds `size` body graphs, valid for the node's
                // lifetime; it is read once, here.
                let raw = unsafe { *bodies_out.add(i) };
                self.body_graph(raw, enclosing.clone())
            })
            .collect();
        Ok(ConditionalNode { node, bodies })
    }

    /// A handle to a body graph `raw` of a conditional node of this graph.
    fn body_graph(&self, raw: CUgraph, enclosing: Vec<u64>) -> GraphHandle {
        let record = Graph {
            context: self.context().clone(),
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            attachments: Mutex::new(Vec::new()),
            body: Some(Body {
                home: self.home().clone(),
                enclosing,
            }),
            not_for_bodies: AtomicBool::new(false),
            has_conditional: AtomicBool::new(false),
            book: Mutex::new(crate::graph::book::Book::default()),
        };
        // SAFETY: `raw` is a body graph the driver made for a node of this graph; it stays
        // valid while the outermost graph lives, which the record keeps; `destroy_graph`
        // never destroys a body (the driver does, with its node).
        unsafe { GraphHandle::from_raw(raw, record) }
    }

    /// The ids of the graphs enclosing this one (empty unless it is a body graph).
    fn enclosing(&self) -> &[u64] {
        self.record()
            .body
            .as_ref()
            .map_or(&[], |body| body.enclosing.as_slice())
    }

    /// Whether this graph is a conditional node's body graph.
    pub fn is_conditional_body(&self) -> bool {
        self.record().body.is_some()
    }

    /// `Err(NotInConditionalBody)` if this graph is a body graph: `what` cannot go in one.
    pub(crate) fn refuse_in_body(&self, what: &'static str) -> Result<()> {
        if self.is_conditional_body() {
            return Err(Error::NotInConditionalBody { what });
        }
        Ok(())
    }

    /// `Err(ConditionalBodyAlone)` if this graph is a body graph, which cannot be `what`.
    pub(crate) fn refuse_body_alone(&self, what: &'static str) -> Result<()> {
        if self.is_conditional_body() {
            return Err(Error::ConditionalBodyAlone { what });
        }
        Ok(())
    }

    /// Lists `handle` in this (outermost) graph's book, once.
    pub(crate) fn list_conditional(&self, handle: &ConditionalHandle) {
        let mut book = crate::sync::lock(&self.record().book);
        if !book
            .conditionals
            .iter()
            .any(|listed| listed.as_cu() == handle.as_cu())
        {
            book.conditionals.push(handle.clone());
        }
    }

    /// Notes kernel node `node` of this graph as a setter of each conditional handle among its
    /// arguments, and lists them in the outermost graph's book.
    pub(crate) fn note_setters<P: KernelParams>(&self, node: &GraphNode, args: &P::Args<'_>) {
        P::for_each_conditional(args, |handle| {
            handle.note_setter(self.id(), node.raw as usize);
            self.home().list_conditional(handle);
        });
    }

    /// `Err(ConditionalSetterChanged)` if an update of kernel node `node` would pass other
    /// conditional handles than the node took.
    pub(crate) fn refuse_setter_change<P: KernelParams>(
        &self,
        node: &GraphNode,
        args: &P::Args<'_>,
    ) -> Result<()> {
        let mut took: Vec<u64> = crate::sync::lock(&self.home().record().book)
            .conditionals
            .iter()
            .filter(|handle| handle.is_set_by(node.graph, node.raw as usize))
            .map(ConditionalHandle::as_cu)
            .collect();
        let mut takes = Vec::new();
        P::for_each_conditional(args, |handle| takes.push(handle.as_cu()));
        took.sort_unstable();
        takes.sort_unstable();
        takes.dedup();
        if took != takes {
            return Err(Error::GraphRule(
                crate::error::GraphRule::ConditionalSetterChanged,
            ));
        }
        Ok(())
    }

    /// Checks that every conditional handle among a kernel node's arguments belongs to this
    /// graph's outermost graph.
    pub(crate) fn check_conditionals<P: KernelParams>(&self, args: &P::Args<'_>) -> Result<()> {
        let home = self.home().id();
        let mut checked = Ok(());
        P::for_each_conditional(args, |handle| {
            if checked.is_ok() && handle.root_id() != home {
                checked = Err(Error::ForeignConditional {
                    handle_graph: handle.graph_id(),
                    graph: self.id(),
                    place: "by a kernel node of another graph",
                });
            }
        });
        checked
    }
}
