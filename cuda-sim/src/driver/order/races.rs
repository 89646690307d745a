//! Data races: two stream operations (kernel launches, copies, memsets, and the nodes of graph
//! launches that are these) that no synchronisation orders, touching overlapping bytes of one
//! allocation, at least one of them writing. Reported as **data race** (`data-race`).
//!
//! Each operation's footprint is a list of merged address ranges, each read, written or
//! updated atomically: a kernel's comes from the interpreter's actual loads and stores
//! (`cuda_sim_ptx::Span`), a copy reads its source and writes its destination, a memset
//! writes its rows. Ranges are kept per allocation as records (FastTrack-style epochs: the
//! operation's timeline and epoch), and a new operation's ranges are checked against the
//! records that overlap them. Ordering is the vector clocks' that the free-order check uses
//! (stream order, events, synchronisations, the legacy stream's implicit synchronisation),
//! except between nodes of one graph launch, which only the graph's edges order.
//!
//! Memory stays bounded: a new record removes the parts of older ones it makes redundant (a
//! write those ordered before it, a read or an atomic update those of its own kind ordered
//! before it), the records of an allocation go with it when it is freed, and records that every
//! live timeline's clock has passed are dropped every [`COLLECT_EVERY`] new records. Two
//! atomic updates never race with each other, and two reads never race.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use cuda_sim_ptx::{Access, Span};

use crate::Sim;
use crate::order::checker::{Clock, NodeTag, Use, covers};

/// Graphs with more nodes than this are treated as if a chain ordered their nodes (their
/// ancestor sets would cost n² bits): fewer races found there, never a false one.
pub const MAX_DAG_NODES: usize = 4096;
/// How many launches' ancestor sets are kept; a node of an older launch is taken as ordered
/// after the launch's earlier nodes.
const KEPT_LAUNCHES: usize = 64;
/// New records between two collections of the records every timeline has passed.
pub const COLLECT_EVERY: usize = 4096;

/// One access inside a range: the block and thread of a kernel that made it, and its
/// address.
pub type Witness = ([u32; 3], [u32; 3], u64);

/// Bytes `[start, end)` that one operation touched one way.
#[derive(Clone, Copy, Debug)]
pub struct Touch {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Read, written or updated atomically.
    pub access: Access,
    /// For a kernel, one access of the range.
    pub witness: Option<Witness>,
}

impl Touch {
    /// `[start, start + len)`, touched as `access` by a copy or a memset.
    pub fn bytes(start: u64, len: u64, access: Access) -> Touch {
        Touch {
            start,
            end: start.saturating_add(len),
            access,
            witness: None,
        }
    }
}

impl From<&Span> for Touch {
    fn from(span: &Span) -> Touch {
        Touch {
            start: span.start,
            end: span.end,
            access: span.access,
            witness: Some((span.block, span.thread, span.addr)),
        }
    }
}

/// An operation, as its records name it.
#[derive(Debug)]
pub struct OpInfo {
    pub operation: Use,
    /// What it is: `kernel NAME`, `a copy`, `a memset`.
    pub what: String,
    /// Its stream's label.
    pub stream: String,
}

/// A device operation that touched a watched managed allocation and that the host's clock
/// did not cover when it ran: its touches of that allocation guard it against the host's
/// accesses (`host_access`).
#[derive(Debug)]
pub struct HostPending {
    pub alloc: u64,
    pub op: Arc<OpInfo>,
    touches: ByKind,
    /// Reported once already (one violation per operation and allocation).
    pub reported: bool,
}

impl HostPending {
    /// Whether it wrote or updated the allocation (any host access then races).
    pub fn writes(&self) -> bool {
        !self.touches[1].is_empty() || !self.touches[2].is_empty()
    }

    /// Its touch of the byte at `addr` that a host access made as `access` conflicts with.
    pub fn touching(&self, addr: u64, access: Access) -> Option<Touch> {
        self.touches
            .iter()
            .flat_map(|list| overlapping(list, addr, addr + 1))
            .find(|touch| conflict(access, touch.access))
            .copied()
    }
}

/// Pending operations kept for the host's accesses; the oldest go beyond it (fewer races
/// found, never a false one).
const HOST_PENDING_LIMIT: usize = 4096;

/// Bytes of one allocation that one operation touched one way.
#[derive(Clone, Debug)]
struct Record {
    touch: Touch,
    op: Arc<OpInfo>,
}

/// The race detector's state.
#[derive(Debug)]
pub struct Races {
    enabled: bool,
    /// Records by the start address of their allocation.
    by_alloc: HashMap<u64, Vec<Record>>,
    /// The ancestor sets (one bit per node) of the nodes of the latest graph launches.
    launches: VecDeque<(u64, Arc<Vec<Vec<u64>>>)>,
    next_launch: u64,
    since_collect: usize,
    /// The managed allocations whose pages can be guarded against the host (`host_access`).
    pub watched: crate::order::page_guard::Watched,
    /// The device operations the host's clock did not cover, that touched them.
    pub host_pending: Vec<HostPending>,
    /// The clocks of the streams where a host function started, joined: the program may
    /// order its threads after a host function by its own means, so what precedes one is
    /// taken as seen by the host's accesses through pointers (fewer races found, never a
    /// false one).
    pub host_visible: Clock,
}

impl Races {
    /// The detector, on or off (`Config::check_data_race`).
    pub fn new(enabled: bool) -> Races {
        Races {
            enabled,
            by_alloc: HashMap::new(),
            launches: VecDeque::new(),
            next_launch: 1,
            since_collect: 0,
            watched: Default::default(),
            host_pending: Vec::new(),
            host_visible: Clock::new(),
        }
    }

    /// Whether races are checked.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Forgets the records of the allocation at `addr` (freed, or new at that address).
    pub fn forget(&mut self, addr: u64) {
        self.by_alloc.remove(&addr);
        self.host_pending.retain(|p| p.alloc != addr);
        self.watched.forget(addr);
    }

    /// Watches the host's accesses to the managed or pinned host allocation at `addr` (`len`
    /// bytes of whole pages of its own).
    pub fn watch_host_visible(&mut self, addr: u64, len: u64) {
        if self.enabled {
            self.watched.watch(addr, len);
        }
    }

    /// Numbers a launch of a graph whose node `i` depends on the nodes `deps[i]` (each an
    /// earlier node: the order is topological) and keeps their ancestor sets; `None` (the
    /// nodes are then taken as a chain) when the check is off, the graph is too large, or a
    /// dependency is not an earlier node.
    pub fn register_launch(&mut self, deps: &[Vec<usize>]) -> Option<u64> {
        if !self.enabled || deps.len() > MAX_DAG_NODES {
            return None;
        }
        let words = deps.len().div_ceil(64);
        let mut ancestors: Vec<Vec<u64>> = Vec::with_capacity(deps.len());
        for node_deps in deps {
            let mut set = vec![0u64; words];
            for &d in node_deps {
                let theirs = ancestors.get(d)?;
                for (word, theirs) in set.iter_mut().zip(theirs) {
                    *word |= theirs;
                }
                set[d / 64] |= 1 << (d % 64);
            }
            ancestors.push(set);
        }
        let launch = self.next_launch;
        self.next_launch += 1;
        self.launches.push_back((launch, Arc::new(ancestors)));
        while self.launches.len() > KEPT_LAUNCHES {
            self.launches.pop_front();
        }
        Some(launch)
    }

    fn ancestors(&self, launch: u64) -> Option<Arc<Vec<Vec<u64>>>> {
        self.launches
            .iter()
            .find(|(id, _)| *id == launch)
            .map(|(_, sets)| Arc::clone(sets))
    }
}

/// How the new operation is ordered: its clock, and its node's ancestors within its launch.
struct Order<'a> {
    operation: Use,
    clock: &'a Clock,
    ancestors: Option<Arc<Vec<Vec<u64>>>>,
}

impl Order<'_> {
    /// Whether `earlier` happened before the new operation.
    fn after(&self, earlier: &Use) -> bool {
        if let (Some(then), Some(now)) = (earlier.node, self.operation.node)
            && then.launch == now.launch
        {
            // Nodes of one launch: only the graph's edges order them (a node's own
            // operations, a child graph's or a conditional body's, run in order).
            return then.node == now.node
                || self.ancestors.as_ref().is_none_or(|sets| {
                    sets.get(now.node as usize).is_none_or(|set| {
                        set.get(then.node as usize / 64)
                            .is_some_and(|word| word & (1 << (then.node % 64)) != 0)
                    })
                });
        }
        earlier.timeline == self.operation.timeline
            || covers(self.clock, earlier.timeline, earlier.epoch)
    }
}

/// Whether touches made as `a` and `b` by unordered operations race.
fn conflict(a: Access, b: Access) -> bool {
    a == Access::Write || a != b
}

/// Whether a record touched as `old` is redundant, for the bytes they share, once a later
/// operation ordered after it touched them as `new`.
fn supersedes(new: Access, old: Access) -> bool {
    new == Access::Write || new == old
}

pub fn verbs(access: Access) -> (&'static str, &'static str) {
    match access {
        Access::Read => ("reads", "read"),
        Access::Write => ("writes", "wrote"),
        Access::Atomic => ("updates atomically", "updated atomically"),
    }
}

/// `what` with the witness when it lies in `[start, end)`, and the graph node.
pub fn describe(op: &OpInfo, touch: &Touch, start: u64, end: u64) -> String {
    let mut text = op.what.clone();
    if let Some((block, thread, addr)) = touch.witness
        && (start..end).contains(&addr)
    {
        text.push_str(&format!(
            " (block {block:?}, thread {thread:?} at {addr:#x})"
        ));
    }
    if let Some(NodeTag { node, .. }) = op.operation.node {
        text.push_str(&format!(" as node {node} of its graph launch"));
    }
    text
}

/// The new operation's touches of one allocation, by kind, each list sorted and disjoint.
type ByKind = [Vec<Touch>; 3];

fn kind_index(access: Access) -> usize {
    match access {
        Access::Read => 0,
        Access::Write => 1,
        Access::Atomic => 2,
    }
}

/// The touches of `list` (sorted, disjoint) that overlap `[start, end)`.
fn overlapping(list: &[Touch], start: u64, end: u64) -> &[Touch] {
    let first = list.partition_point(|t| t.end <= start);
    let last = first + list[first..].partition_point(|t| t.start < end);
    &list[first..last]
}

impl Sim {
    /// Checks the touches of `operation` (what it is: `what`) against the records of the
    /// operations not ordered before it, reports each race (one per earlier operation and
    /// allocation), and records the touches. Bytes in no allocation (pageable host memory)
    /// are not tracked.
    pub fn check_races(&mut self, operation: Use, what: String, touches: &[Touch]) {
        if !self.races.enabled || touches.is_empty() {
            return;
        }
        // The touches, cut at allocation boundaries, by allocation and kind.
        let mut mine: BTreeMap<u64, ByKind> = BTreeMap::new();
        for touch in touches {
            for (&start, alloc) in self.allocs.range(..touch.end).rev() {
                let end = start.saturating_add(alloc.size);
                if end <= touch.start {
                    break;
                }
                let (from, to) = (touch.start.max(start), touch.end.min(end));
                if from < to {
                    mine.entry(start).or_default()[kind_index(touch.access)].push(Touch {
                        start: from,
                        end: to,
                        ..*touch
                    });
                }
            }
        }
        if mine.is_empty() {
            return;
        }
        for lists in mine.values_mut() {
            for list in lists.iter_mut() {
                merge_touches(list);
            }
        }
        let clock = self.checker.clock(operation.timeline).clone();
        let order = Order {
            operation,
            clock: &clock,
            ancestors: operation
                .node
                .and_then(|tag| self.races.ancestors(tag.launch)),
        };
        let info = Arc::new(OpInfo {
            operation,
            what,
            stream: self.checker.label(operation.timeline).to_string(),
        });
        if operation.timeline != crate::order::checker::HOST {
            for (&alloc, lists) in &mine {
                if self.races.watched.contains(alloc) {
                    self.races.host_pending.push(HostPending {
                        alloc,
                        op: Arc::clone(&info),
                        touches: lists.clone(),
                        reported: false,
                    });
                }
            }
            let excess = self
                .races
                .host_pending
                .len()
                .saturating_sub(HOST_PENDING_LIMIT);
            self.races.host_pending.drain(..excess);
        }
        let mut messages = Vec::new();
        let mut added = 0;
        for (&alloc, lists) in &mine {
            let size = self.allocs.get(&alloc).map_or(0, |a| a.size);
            let records = self.races.by_alloc.entry(alloc).or_default();
            let mut reported: Vec<*const OpInfo> = Vec::new();
            let mut kept = Vec::with_capacity(records.len());
            for record in records.drain(..) {
                let old = record.touch;
                let before = order.after(&record.op.operation);
                if !before && !reported.contains(&Arc::as_ptr(&record.op)) {
                    let clash = lists.iter().flat_map(|list| {
                        overlapping(list, old.start, old.end)
                            .iter()
                            .filter(|new| conflict(new.access, old.access))
                    });
                    if let Some(new) = clash.min_by_key(|new| new.start.max(old.start)) {
                        reported.push(Arc::as_ptr(&record.op));
                        let (from, to) = (new.start.max(old.start), new.end.min(old.end));
                        messages.push(format!(
                            "{} (call #{}) on {}, {}, {} [{from:#x}, {to:#x}) ({} bytes) of the {size}-byte allocation at {alloc:#x}, which {} (call #{}) on {}, {}, {}: no synchronisation orders them",
                            info.operation.call,
                            info.operation.seq,
                            info.stream,
                            describe(&info, new, from, to),
                            verbs(new.access).0,
                            to - from,
                            record.op.operation.call,
                            record.op.operation.seq,
                            record.op.stream,
                            describe(&record.op, &old, from, to),
                            verbs(old.access).1,
                        ));
                    }
                }
                if !before {
                    kept.push(record);
                    continue;
                }
                // The parts of the record that a touch of the new operation supersedes go.
                let mut cuts: Vec<(u64, u64)> = lists
                    .iter()
                    .filter(|list| {
                        list.first()
                            .is_some_and(|t| supersedes(t.access, old.access))
                    })
                    .flat_map(|list| overlapping(list, old.start, old.end))
                    .map(|t| (t.start, t.end))
                    .collect();
                if cuts.is_empty() {
                    kept.push(record);
                    continue;
                }
                cuts.sort_unstable();
                let mut at = old.start;
                for (from, to) in cuts {
                    if from > at {
                        kept.push(piece(&record, at, from));
                    }
                    at = at.max(to);
                }
                if at < old.end {
                    kept.push(piece(&record, at, old.end));
                }
            }
            for list in lists {
                for &touch in list {
                    kept.push(Record {
                        touch,
                        op: Arc::clone(&info),
                    });
                    added += 1;
                }
            }
            *records = kept;
        }
        for message in messages {
            self.checker.violation("data-race", message);
        }
        self.races.since_collect += added;
        if self.races.since_collect >= COLLECT_EVERY {
            self.races.since_collect = 0;
            self.collect_races();
        }
    }

    /// Drops the records that every live timeline's clock has passed: no later operation can
    /// be unordered with them.
    fn collect_races(&mut self) {
        let mut live = vec![crate::order::checker::HOST];
        live.extend(self.streams.values().map(|s| s.timeline));
        for context in self.contexts.values() {
            live.push(context.legacy);
            live.extend(context.per_thread.values().copied());
        }
        let mut floor: Option<Clock> = None;
        for timeline in live {
            let clock = self.checker.clock(timeline);
            floor = Some(match floor {
                None => clock.clone(),
                Some(mut floor) => {
                    floor.truncate(clock.len());
                    for (mine, theirs) in floor.iter_mut().zip(clock) {
                        *mine = (*mine).min(*theirs);
                    }
                    floor
                }
            });
        }
        let Some(floor) = floor else {
            return;
        };
        for records in self.races.by_alloc.values_mut() {
            records.retain(|r| !covers(&floor, r.op.operation.timeline, r.op.operation.epoch));
        }
        self.races.by_alloc.retain(|_, records| !records.is_empty());
    }
}

/// `record` cut to `[start, end)`.
fn piece(record: &Record, start: u64, end: u64) -> Record {
    Record {
        touch: Touch {
            start,
            end,
            ..record.touch
        },
        op: Arc::clone(&record.op),
    }
}

/// Sorts `list` (touches of one kind) by start and merges those that overlap or adjoin.
fn merge_touches(list: &mut Vec<Touch>) {
    list.sort_unstable_by_key(|t| (t.start, t.end));
    let mut out: Vec<Touch> = Vec::with_capacity(list.len());
    for touch in list.drain(..) {
        match out.last_mut() {
            Some(last) if touch.start <= last.end => last.end = last.end.max(touch.end),
            _ => out.push(touch),
        }
    }
    *list = out;
}
