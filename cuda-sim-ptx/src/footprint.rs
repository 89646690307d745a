//! A launch's footprint: the global bytes its threads actually loaded, stored and updated
//! atomically, as merged address ranges ([`Span`]s), for the simulator's race detector.
//!
//! Each worker keeps a few open runs per kind of access: an access that touches or adjoins
//! one of them extends it (consecutive threads touching consecutive elements make one run),
//! any other access opens a new run and closes the oldest into a list. The list is sorted
//! and merged whenever it doubles, so a launch costs memory in proportion to the number of
//! disjoint ranges it touched, not to its accesses.

/// How a range was touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Access {
    /// Loaded (`ld`, and the reads of `printf` arguments and tensor copies).
    Read,
    /// Stored (`st`, tensor stores).
    Write,
    /// Updated by an atomic (`atom`, `red`): a write, but not a race with other atomics.
    Atomic,
}

impl Access {
    fn index(self) -> usize {
        match self {
            Access::Read => 0,
            Access::Write => 1,
            Access::Atomic => 2,
        }
    }
}

/// One merged range `[start, end)` touched one way, with one access inside it as a witness:
/// the first access of the range's lowest part (its block, thread and address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// How the bytes were touched.
    pub access: Access,
    /// The witness's block index.
    pub block: [u32; 3],
    /// The witness's thread index in its block.
    pub thread: [u32; 3],
    /// The witness's address.
    pub addr: u64,
}

/// Open runs per kind of access.
const RUNS: usize = 4;
/// List length at which the first merge happens.
const FIRST_LIMIT: usize = 1024;

/// One worker's footprint so far.
pub(crate) struct Recorder {
    runs: [[Option<Span>; RUNS]; 3],
    next: [usize; 3],
    closed: Vec<Span>,
    limit: usize,
}

impl Recorder {
    pub(crate) fn new() -> Recorder {
        Recorder {
            runs: [[None; RUNS]; 3],
            next: [0; 3],
            closed: Vec::new(),
            limit: FIRST_LIMIT,
        }
    }

    /// Notes an access of `len` bytes at `addr` by `thread` of `block`.
    #[inline]
    pub(crate) fn note(
        &mut self,
        access: Access,
        addr: u64,
        len: u64,
        block: [u32; 3],
        thread: [u32; 3],
    ) {
        let end = addr.saturating_add(len);
        let kind = access.index();
        for run in self.runs[kind].iter_mut().flatten() {
            if addr <= run.end && end >= run.start {
                if addr < run.start {
                    run.start = addr;
                    run.block = block;
                    run.thread = thread;
                    run.addr = addr;
                }
                run.end = run.end.max(end);
                return;
            }
        }
        let slot = self.next[kind];
        self.next[kind] = (slot + 1) % RUNS;
        let fresh = Span {
            start: addr,
            end,
            access,
            block,
            thread,
            addr,
        };
        if let Some(old) = self.runs[kind][slot].replace(fresh) {
            self.closed.push(old);
            if self.closed.len() >= self.limit {
                merge(&mut self.closed);
                if self.closed.len() * 2 > self.limit {
                    self.limit *= 2;
                }
            }
        }
    }

    /// Everything noted, merged: sorted by kind, then address.
    pub(crate) fn finish(mut self) -> Vec<Span> {
        for runs in &mut self.runs {
            self.closed.extend(runs.iter_mut().filter_map(Option::take));
        }
        merge(&mut self.closed);
        self.closed
    }
}

/// Sorts `spans` by kind and start and merges those of one kind that overlap or adjoin.
pub(crate) fn merge(spans: &mut Vec<Span>) {
    spans.sort_unstable_by_key(|s| (s.access, s.start, s.end));
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for span in spans.drain(..) {
        match out.last_mut() {
            Some(last) if last.access == span.access && span.start <= last.end => {
                last.end = last.end.max(span.end);
            }
            _ => out.push(span),
        }
    }
    *spans = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_and_strided_accesses_merge() {
        let mut r = Recorder::new();
        for i in 0..10_000u64 {
            r.note(Access::Read, 0x1000 + 4 * i, 4, [0; 3], [i as u32, 0, 0]);
            r.note(
                Access::Write,
                0x100_000 + 8 * i,
                4,
                [0; 3],
                [i as u32, 0, 0],
            );
        }
        r.note(Access::Atomic, 0x10, 4, [1, 0, 0], [2, 0, 0]);
        let spans = r.finish();
        assert_eq!(spans.len(), 2 + 10_000);
        assert_eq!((spans[0].start, spans[0].end), (0x1000, 0x1000 + 40_000));
        assert_eq!(spans[0].thread, [0, 0, 0]);
        assert!(spans[1..10_001].iter().all(|s| s.end - s.start == 4));
        assert_eq!(spans[10_001].access, Access::Atomic);
        assert_eq!(spans[10_001].block, [1, 0, 0]);
    }
}
