//! Uninitialised reads, as compute-sanitizer's initcheck finds them: **uninitialized read**
//! (`uninitialized-read`), and allocations no operation ever touched, listed as notes
//! (`unused-allocation`, not violations).
//!
//! Each device allocation (`cuMemAlloc*`, pool and stream-ordered allocations, graph memory)
//! has a shadow: the set of its bytes written so far, as disjoint offset ranges (so a
//! gigabyte allocation memset once costs one range). It is made empty when the allocation is
//! made (a pool block handed out again starts uninitialised) and dropped when it is freed.
//! Memsets, copies (their destination) and kernel stores and atomics add to it. A kernel's
//! load of a byte outside it, that the same launch did not store to, is reported once per
//! launch and allocation; so is a copy whose device source holds such bytes (initcheck's
//! "Host API memory access error … on access by cudaMemcpy source").
//!
//! Memory not listed above counts as initialised: managed memory (the host writes it through
//! its pointer, which the simulator does not see), pinned host memory, IPC imports, module
//! variables and virtual-memory mappings (two mappings may alias one physical allocation).

use std::collections::{BTreeMap, HashMap};

use cuda_sim_ptx::{Access, Span};

use crate::Sim;
use crate::order::checker::Use;
use crate::order::verdict::Note;
use crate::resources::memory::AllocKind;

/// Unused allocations listed at exit, at most (the rest are counted).
const MAX_UNUSED_NOTES: usize = 64;

/// The written bytes of one allocation.
#[derive(Debug)]
struct Shadow {
    size: u64,
    /// Written offset ranges: start → end, disjoint and not adjacent.
    written: BTreeMap<u64, u64>,
    /// Whether any operation touched it.
    touched: bool,
    made_by: (&'static str, u64),
}

impl Shadow {
    /// Marks `[from, to)` (offsets) written.
    fn write(&mut self, from: u64, to: u64) {
        let (mut from, mut to) = (from, to.min(self.size));
        if from >= to {
            return;
        }
        // Ranges that overlap or adjoin `[from, to)` merge into it.
        let mut gone = Vec::new();
        if let Some((&s, &e)) = self.written.range(..=from).next_back()
            && e >= from
        {
            from = s;
            to = to.max(e);
            gone.push(s);
        }
        for (&s, &e) in self.written.range(from..=to) {
            to = to.max(e);
            gone.push(s);
        }
        for s in gone {
            self.written.remove(&s);
        }
        self.written.insert(from, to);
    }

    /// The parts of `[from, to)` (offsets) not written, in order.
    fn holes(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        let mut holes = Vec::new();
        let mut at = from;
        let first = self
            .written
            .range(..=from)
            .next_back()
            .map_or(from, |(&s, _)| s);
        for (&s, &e) in self.written.range(first..to) {
            if s > at {
                holes.push((at, s.min(to)));
            }
            at = at.max(e);
            if at >= to {
                break;
            }
        }
        if at < to {
            holes.push((at, to));
        }
        holes
    }
}

/// The check's state.
#[derive(Debug, Default)]
pub struct Initcheck {
    enabled: bool,
    /// Shadows by allocation start.
    shadows: HashMap<u64, Shadow>,
    /// Notes of allocations freed untouched.
    unused: Vec<Note>,
    unused_more: u64,
}

impl Initcheck {
    /// The check, on or off (`Config::check_initcheck`).
    pub fn new(enabled: bool) -> Initcheck {
        Initcheck {
            enabled,
            ..Initcheck::default()
        }
    }

    /// Whether memory of `kind` has a shadow.
    fn tracked(kind: AllocKind) -> bool {
        matches!(kind, AllocKind::Sync | AllocKind::Pool | AllocKind::Graph)
    }

    /// A new allocation: uninitialised (when tracked).
    pub fn allocated(
        &mut self,
        addr: u64,
        size: u64,
        kind: AllocKind,
        made_by: (&'static str, u64),
    ) {
        self.shadows.remove(&addr);
        if self.enabled && Initcheck::tracked(kind) {
            self.shadows.insert(
                addr,
                Shadow {
                    size,
                    written: BTreeMap::new(),
                    touched: false,
                    made_by,
                },
            );
        }
    }

    /// The allocation at `addr` was exported to other processes (`cuMemPoolExportPointer`):
    /// their writes are out of this process's sight, so from now on it counts as initialised,
    /// as an import does.
    pub fn shared(&mut self, addr: u64) {
        self.shadows.remove(&addr);
    }

    /// The allocation at `addr` was freed: an untouched one becomes a note.
    pub fn freed(&mut self, addr: u64) {
        let Some(shadow) = self.shadows.remove(&addr) else {
            return;
        };
        if !shadow.touched {
            self.note_unused(addr, &shadow, "freed");
        }
    }

    fn note_unused(&mut self, addr: u64, shadow: &Shadow, when: &str) {
        if self.unused.len() >= MAX_UNUSED_NOTES {
            self.unused_more += 1;
            return;
        }
        self.unused.push(Note {
            kind: "unused-allocation",
            message: format!(
                "the {}-byte allocation at {addr:#x} (made by {} call #{}) was {when} without any memset, copy or kernel touching it",
                shadow.size, shadow.made_by.0, shadow.made_by.1
            ),
        });
    }

    /// The notes for the report: allocations freed untouched, then live ones untouched.
    pub fn notes(&self) -> Vec<Note> {
        let mut notes = self.unused.clone();
        let mut more = self.unused_more;
        let mut live: Vec<(&u64, &Shadow)> =
            self.shadows.iter().filter(|(_, s)| !s.touched).collect();
        live.sort_by_key(|(addr, _)| **addr);
        for (&addr, shadow) in live {
            if notes.len() >= MAX_UNUSED_NOTES {
                more += 1;
                continue;
            }
            notes.push(Note {
                kind: "unused-allocation",
                message: format!(
                    "the {}-byte allocation at {addr:#x} (made by {} call #{}) is still allocated at exit and no memset, copy or kernel ever touched it",
                    shadow.size, shadow.made_by.0, shadow.made_by.1
                ),
            });
        }
        if more > 0 {
            notes.push(Note {
                kind: "unused-allocation",
                message: format!("{more} more allocations were never touched"),
            });
        }
        notes
    }

    /// Sorted, disjoint absolute ranges never written, over every tracked allocation: what
    /// a kernel's loads are watched for.
    pub fn unwritten(&self) -> Vec<(u64, u64)> {
        let mut ranges = Vec::new();
        if !self.enabled {
            return ranges;
        }
        for (&addr, shadow) in &self.shadows {
            for (from, to) in shadow.holes(0, shadow.size) {
                ranges.push((addr + from, addr + to));
            }
        }
        ranges.sort_unstable();
        ranges
    }
}

/// The tracked allocations that `[start, end)` overlaps: `(allocation start, from, to)` with
/// absolute bounds cut to the allocation.
fn pieces(sim: &Sim, start: u64, end: u64) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    for (&base, alloc) in sim.allocs.range(..end).rev() {
        let top = base.saturating_add(alloc.size);
        if top <= start {
            break;
        }
        if sim.initcheck.shadows.contains_key(&base) {
            out.push((base, start.max(base), end.min(top)));
        }
    }
    out.reverse();
    out
}

impl Sim {
    /// Operation `operation` wrote `[start, start + len)`.
    pub fn init_written(&mut self, start: u64, len: u64) {
        if !self.initcheck.enabled || len == 0 {
            return;
        }
        for (base, from, to) in pieces(self, start, start.saturating_add(len)) {
            if let Some(shadow) = self.initcheck.shadows.get_mut(&base) {
                shadow.touched = true;
                shadow.write(from - base, to - base);
            }
        }
    }

    /// A library call (`operation`, `what`) touches `touches`: the unwritten bytes it reads
    /// are reported, once per allocation, then what it writes counts as written.
    pub fn init_library(
        &mut self,
        operation: Use,
        what: &str,
        touches: &[crate::order::races::Touch],
    ) {
        if !self.initcheck.enabled {
            return;
        }
        // By allocation: unwritten bytes read, the first of them, and the range read.
        let mut holes_by: BTreeMap<u64, (u64, u64, u64, u64)> = BTreeMap::new();
        for touch in touches.iter().filter(|t| t.access == Access::Read) {
            for (base, from, to) in pieces(self, touch.start, touch.end) {
                let Some(shadow) = self.initcheck.shadows.get_mut(&base) else {
                    continue;
                };
                shadow.touched = true;
                let holes = shadow.holes(from - base, to - base);
                let Some(&(first, _)) = holes.first() else {
                    continue;
                };
                let bytes: u64 = holes.iter().map(|(a, b)| b - a).sum();
                let entry = holes_by.entry(base).or_insert((0, base + first, from, to));
                entry.0 += bytes;
                entry.1 = entry.1.min(base + first);
                entry.2 = entry.2.min(from);
                entry.3 = entry.3.max(to);
            }
        }
        for (base, (bytes, first, from, to)) in holes_by {
            let shadow = &self.initcheck.shadows[&base];
            let message = format!(
                "{what} ({} call #{} on {}) reads [{from:#x}, {to:#x}), {bytes} bytes of which were never written, the first at {first:#x}, of the {}-byte allocation at {base:#x} (made by {} call #{})",
                operation.call,
                operation.seq,
                self.checker.label(operation.timeline),
                shadow.size,
                shadow.made_by.0,
                shadow.made_by.1,
            );
            self.checker.violation("uninitialized-read", message);
        }
        for touch in touches.iter().filter(|t| t.access != Access::Read) {
            self.init_written(touch.start, touch.end - touch.start);
        }
    }

    /// A copy (`operation`, `what`) reads `[start, start + len)`: its unwritten bytes are
    /// reported, once per allocation.
    pub fn init_copy_read(&mut self, operation: Use, start: u64, len: u64) {
        if !self.initcheck.enabled || len == 0 {
            return;
        }
        for (base, from, to) in pieces(self, start, start.saturating_add(len)) {
            let Some(shadow) = self.initcheck.shadows.get_mut(&base) else {
                continue;
            };
            shadow.touched = true;
            let holes = shadow.holes(from - base, to - base);
            let Some(&(first, _)) = holes.first() else {
                continue;
            };
            let bytes: u64 = holes.iter().map(|(a, b)| b - a).sum();
            let message = format!(
                "{} (call #{}) on {} copies from [{from:#x}, {to:#x}), {bytes} bytes of which were never written, the first at {:#x}, of the {}-byte allocation at {base:#x} (made by {} call #{})",
                operation.call,
                operation.seq,
                self.checker.label(operation.timeline),
                base + first,
                shadow.size,
                shadow.made_by.0,
                shadow.made_by.1,
            );
            self.checker.violation("uninitialized-read", message);
        }
    }

    /// After kernel `name` ran as `operation`: its loads of bytes unwritten before the launch
    /// (`unread`) that it did not store to itself are reported, once per allocation; then
    /// what it stored and updated (`footprint`) is written. `touched` lists the starts of the
    /// allocations it touched.
    pub fn init_kernel(
        &mut self,
        operation: Use,
        name: &str,
        unread: &[Span],
        footprint: &[Span],
        touched: &[u64],
    ) {
        if !self.initcheck.enabled {
            return;
        }
        for base in touched {
            if let Some(shadow) = self.initcheck.shadows.get_mut(base) {
                shadow.touched = true;
            }
        }
        // The launch's own stores and atomics count as initialising what it read.
        let mut stored: Vec<(u64, u64)> = footprint
            .iter()
            .filter(|s| s.access != Access::Read)
            .map(|s| (s.start, s.end))
            .collect();
        stored.sort_unstable();
        let mut reported: Vec<u64> = Vec::new();
        let mut messages = Vec::new();
        for span in unread {
            for (base, from, to) in pieces(self, span.start, span.end) {
                if reported.contains(&base) {
                    continue;
                }
                let Some(shadow) = self.initcheck.shadows.get(&base) else {
                    continue;
                };
                let mut bad = shadow.holes(from - base, to - base);
                for hole in &mut bad {
                    *hole = (hole.0 + base, hole.1 + base);
                }
                let bad = subtract(&bad, &stored);
                let Some(&(first, _)) = bad.first() else {
                    continue;
                };
                reported.push(base);
                let bytes: u64 = bad.iter().map(|(a, b)| b - a).sum();
                let witness = if span.addr <= first && first - span.addr < 32 {
                    format!(
                        "block {:?}, thread {:?} reads {:#x}",
                        span.block, span.thread, span.addr
                    )
                } else {
                    format!(
                        "the reads there begin with block {:?}, thread {:?} at {:#x}",
                        span.block, span.thread, span.addr
                    )
                };
                messages.push(format!(
                    "kernel {name} ({} call #{} on {}; {witness}) reads {bytes} bytes never written, the first at {first:#x}, of the {}-byte allocation at {base:#x} (made by {} call #{})",
                    operation.call,
                    operation.seq,
                    self.checker.label(operation.timeline),
                    shadow.size,
                    shadow.made_by.0,
                    shadow.made_by.1,
                ));
            }
        }
        for message in messages {
            self.checker.violation("uninitialized-read", message);
        }
        for (start, end) in stored {
            self.init_written(start, end - start);
        }
    }
}

/// `ranges` (sorted, disjoint) without the parts inside `cut` (sorted by start).
fn subtract(ranges: &[(u64, u64)], cut: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(from, to) in ranges {
        let mut at = from;
        let first = cut.partition_point(|&(_, e)| e <= from);
        for &(s, e) in &cut[first..] {
            if s >= to || at >= to {
                break;
            }
            if s > at {
                out.push((at, s));
            }
            at = at.max(e);
        }
        if at < to {
            out.push((at, to));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadow_ranges_merge_and_holes_are_found() {
        let mut shadow = Shadow {
            size: 100,
            written: BTreeMap::new(),
            touched: false,
            made_by: ("cuMemAlloc_v2", 1),
        };
        shadow.write(10, 20);
        shadow.write(30, 40);
        assert_eq!(shadow.holes(0, 100), [(0, 10), (20, 30), (40, 100)]);
        shadow.write(20, 30);
        assert_eq!(shadow.written.len(), 1);
        assert_eq!(shadow.holes(15, 35), []);
        shadow.write(0, 1000);
        assert_eq!(shadow.holes(0, 100), []);
        assert_eq!(
            subtract(&[(0, 10), (20, 30)], &[(5, 25)]),
            [(0, 5), (25, 30)]
        );
    }
}
