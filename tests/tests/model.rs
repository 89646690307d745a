//! A proptest state machine: random sequences of create (with owners), clone, drop,
//! downgrade, upgrade and close over two handle types with dependencies, checked after every
//! step against a reference model of who keeps whom alive.
//!
//! Invariants: every resource is deleted exactly once; none is deleted while a strong handle
//! (held by the program or by a dependent) exists; an owner is never deleted before its
//! dependents; the live counts match the model.

use std::collections::{BTreeMap, BTreeSet};

use handles_core::CloseError;
use handles_tests::{Event, LeafHandle, NodeHandle, clear_log, events_for};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    CreateNode { parent: Option<usize> },
    CreateLeaf { node: usize },
    Clone(usize),
    Drop(usize),
    Downgrade(usize),
    Upgrade(usize),
    Close(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => proptest::option::of(any::<usize>()).prop_map(|parent| Op::CreateNode { parent }),
        2 => any::<usize>().prop_map(|node| Op::CreateLeaf { node }),
        3 => any::<usize>().prop_map(Op::Clone),
        4 => any::<usize>().prop_map(Op::Drop),
        1 => any::<usize>().prop_map(Op::Downgrade),
        2 => any::<usize>().prop_map(Op::Upgrade),
        2 => any::<usize>().prop_map(Op::Close),
    ]
}

#[derive(Clone)]
enum Strong {
    Node(NodeHandle),
    Leaf(LeafHandle),
}

enum Weak {
    Node(handles_tests::NodeWeak),
    Leaf(handles_tests::LeafWeak),
}

impl Strong {
    fn id(&self) -> u64 {
        match self {
            Strong::Node(node) => node.id(),
            Strong::Leaf(leaf) => leaf.as_raw(),
        }
    }
}

/// The reference model: each resource's owner and kind.
#[derive(Default)]
struct Model {
    owner: BTreeMap<u64, Option<u64>>,
    is_node: BTreeMap<u64, bool>,
}

impl Model {
    /// Resources kept alive by the program's handles, directly or through dependents.
    fn alive(&self, held: &[Strong]) -> BTreeSet<u64> {
        let mut alive: BTreeSet<u64> = held.iter().map(Strong::id).collect();
        let mut frontier: Vec<u64> = alive.iter().copied().collect();
        while let Some(id) = frontier.pop() {
            if let Some(Some(owner)) = self.owner.get(&id)
                && alive.insert(*owner)
            {
                frontier.push(*owner);
            }
        }
        alive
    }

    /// The strong count of `id`'s box: program handles plus live dependents.
    fn strong_count(&self, id: u64, held: &[Strong], alive: &BTreeSet<u64>) -> usize {
        let direct = held.iter().filter(|h| h.id() == id).count();
        let dependents = alive
            .iter()
            .filter(|other| self.owner.get(other) == Some(&Some(id)))
            .count();
        direct + dependents
    }

    fn check(&self, held: &[Strong], start: (usize, usize)) -> Result<(), TestCaseError> {
        let alive = self.alive(held);
        let ids: Vec<u64> = self.owner.keys().copied().collect();
        let log = events_for(&ids);
        let mut seen = BTreeSet::new();
        let mut position = BTreeMap::new();
        for (index, event) in log.iter().enumerate() {
            let id = match event {
                Event::DeleteNode(id) | Event::DeleteLeaf(id) => *id,
            };
            prop_assert!(seen.insert(id), "{id} deleted twice");
            prop_assert!(!alive.contains(&id), "{id} deleted while strongly held");
            position.insert(id, index);
        }
        let expected: BTreeSet<u64> = ids
            .iter()
            .copied()
            .filter(|id| !alive.contains(id))
            .collect();
        prop_assert_eq!(&seen, &expected, "deleted set differs from the model");
        for (child, at) in &position {
            if let Some(Some(owner)) = self.owner.get(child) {
                let owner_at = position.get(owner).copied().unwrap_or(usize::MAX);
                prop_assert!(
                    owner_at > *at,
                    "owner {owner} deleted before dependent {child}"
                );
            }
        }
        let nodes = alive.iter().filter(|id| self.is_node[id]).count();
        let leaves = alive.len() - nodes;
        prop_assert_eq!(NodeHandle::live_count(), Some(start.0 + nodes));
        prop_assert_eq!(LeafHandle::live_count(), Some(start.1 + leaves));
        Ok(())
    }
}

fn pick<T>(items: &[T], index: usize) -> Option<usize> {
    (!items.is_empty()).then(|| index % items.len())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    clear_log();
    let start = (
        NodeHandle::live_count().unwrap(),
        LeafHandle::live_count().unwrap(),
    );
    let mut model = Model::default();
    let mut held: Vec<Strong> = Vec::new();
    let mut weaks: Vec<Weak> = Vec::new();
    let nodes = |held: &[Strong]| -> Vec<NodeHandle> {
        held.iter()
            .filter_map(|h| match h {
                Strong::Node(node) => Some(node.clone()),
                Strong::Leaf(_) => None,
            })
            .collect()
    };
    for op in ops {
        match op {
            Op::CreateNode { parent } => {
                let candidates = nodes(&held);
                let parent = parent
                    .and_then(|i| pick(&candidates, i))
                    .map(|i| candidates[i].clone());
                let node = NodeHandle::create(parent.clone());
                model.owner.insert(node.id(), parent.map(|p| p.id()));
                model.is_node.insert(node.id(), true);
                held.push(Strong::Node(node));
            }
            Op::CreateLeaf { node } => {
                let candidates = nodes(&held);
                if let Some(i) = pick(&candidates, node) {
                    let leaf = LeafHandle::create(candidates[i].clone(), "model");
                    model.owner.insert(leaf.as_raw(), Some(candidates[i].id()));
                    model.is_node.insert(leaf.as_raw(), false);
                    held.push(Strong::Leaf(leaf));
                }
            }
            Op::Clone(i) => {
                if let Some(i) = pick(&held, i) {
                    held.push(held[i].clone());
                }
            }
            Op::Drop(i) => {
                if let Some(i) = pick(&held, i) {
                    held.swap_remove(i);
                }
            }
            Op::Downgrade(i) => {
                if let Some(i) = pick(&held, i) {
                    weaks.push(match &held[i] {
                        Strong::Node(node) => Weak::Node(node.downgrade()),
                        Strong::Leaf(leaf) => Weak::Leaf(leaf.downgrade()),
                    });
                }
            }
            Op::Upgrade(i) => {
                if let Some(i) = pick(&weaks, i) {
                    let upgraded = match &weaks[i] {
                        Weak::Node(weak) => weak.upgrade().map(Strong::Node),
                        Weak::Leaf(weak) => weak.upgrade().map(Strong::Leaf),
                    };
                    let id = match &weaks[i] {
                        Weak::Node(weak) => weak.upgrade().map(|n| n.id()),
                        Weak::Leaf(weak) => weak.upgrade().map(|l| l.as_raw()),
                    };
                    let alive = model.alive(&held);
                    prop_assert_eq!(upgraded.is_some(), id.is_some_and(|id| alive.contains(&id)));
                    held.extend(upgraded);
                }
            }
            Op::Close(i) => {
                if let Some(i) = pick(&held, i) {
                    let handle = held.swap_remove(i);
                    let id = handle.id();
                    let alive = model.alive(&held);
                    let others = model.strong_count(id, &held, &alive);
                    let closed = match handle {
                        Strong::Node(node) => node.close().map_err(|e| match e {
                            CloseError::StillShared(node) => Some(Strong::Node(node)),
                            CloseError::Deleter(_) => None,
                        }),
                        Strong::Leaf(leaf) => leaf.close().map_err(|e| match e {
                            CloseError::StillShared(leaf) => Some(Strong::Leaf(leaf)),
                            CloseError::Deleter(_) => None,
                        }),
                    };
                    match closed {
                        Ok(()) => prop_assert_eq!(others, 0, "closed while shared"),
                        Err(Some(back)) => {
                            prop_assert!(others > 0, "refused although it was the last");
                            held.push(back);
                        }
                        Err(None) => prop_assert!(false, "deleter failed"),
                    }
                }
            }
        }
        model.check(&held, start)?;
    }
    drop(held);
    model.check(&[], start)
}

proptest! {
    // Under miri (about a thousand times slower, no file access) fewer cases, not persisted.
    #![proptest_config(if cfg!(miri) {
        ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() }
    } else {
        ProptestConfig { cases: 10_000, ..ProptestConfig::default() }
    })]

    #[test]
    fn handles_match_the_reference_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops)?;
    }
}
