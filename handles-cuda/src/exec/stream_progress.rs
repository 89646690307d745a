//! What stream order already proves complete, so that a wait the host has in effect done is not
//! asked of the driver again (each `cuEventSynchronize` or `cuEventQuery` of a completed event
//! costs about 1.4 µs on driver 580, as much as a short copy).
//!
//! An event recorded on a stream this crate owns takes a *stamp* just before `cuEventRecord` is
//! called (`before`) and one once it returned (`after`), from a counter of the stream's slot in
//! [`Progress`]. If record A's `after` is below record B's `before`, A's call returned before
//! B's was made (the counter's read-modify-writes are totally ordered, and each carries the
//! happens-before of its thread), so if both are on one stream, the stream runs A before B.
//! When the host sees B complete (a synchronize or a query of B's event that said "done"), its
//! stream's entry learns `done_below = B.before`: every record of that stream stamped `after`
//! below it has completed too.
//!
//! Streams are told apart by address and the address's generation (`stream_generation.rs`),
//! so a stream destroyed and a new one at its address never share an entry. Streams whose
//! addresses share a slot share its counter (which only spaces their stamps) and its entry,
//! which holds one stream at a time: a stream that takes it over only loses the other's
//! knowledge, never lends it.
//!
//! An event's stamps ([`RecordStamps`]) describe its latest record only when no other record
//! of it overlapped that one: a record in flight, two records that overlapped (neither leaves
//! stamps) and a failed record leave it without stamps. A record this crate makes other than
//! by `EventHandle::record` (a launch's programmatic event) runs between `begin` and `end` with
//! no stream, so it leaves none either; an event others may record (a graph's record node,
//! another process) is `RecordCount::uncounted`, which the caller checks first, and loses its
//! stamps ([`RecordStamps::forget`]) before it becomes so.
//! A version, bumped by every record that begins, tells a waiter whether the record it saw
//! stamped before its driver call is still the latest after it. On its own so that
//! `tests/loom_stream_progress.rs` can model-check it against a simulated stream.

#[cfg(handles_cuda_loom)]
use loom::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering},
};
#[cfg(not(handles_cuda_loom))]
use std::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering},
};

/// How many slots stream addresses share.
#[cfg(not(handles_cuda_loom))]
pub(crate) const SLOTS: usize = 256;
/// How many slots stream addresses share (a model's stack holds the table).
#[cfg(handles_cuda_loom)]
pub(crate) const SLOTS: usize = 4;

/// A stream whose records are stamped: its address and the address's generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StreamId {
    /// The stream's address.
    pub(crate) raw: usize,
    /// The address's generation when the record was made.
    pub(crate) generation: u64,
}

/// How far one stream is known to have run: every record stamped `after` below `done_below`
/// has completed.
#[derive(Clone, Copy)]
struct Entry {
    stream: StreamId,
    done_below: u64,
}

/// Aligned to a cache line: neighbouring slots' counters are written by different threads.
#[repr(align(64))]
struct Slot {
    stamps: AtomicU64,
    known: Mutex<Option<Entry>>,
}

/// The stamp counters and what is known of each stream, by slot.
pub(crate) struct Progress([Slot; SLOTS]);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(not(handles_cuda_loom))]
    return crate::sync::lock(mutex);
    #[cfg(handles_cuda_loom)]
    return mutex.lock().unwrap();
}

impl Progress {
    /// No stamp yet, nothing known.
    #[cfg(not(handles_cuda_loom))]
    pub(crate) const fn new() -> Self {
        Progress(
            [const {
                Slot {
                    stamps: AtomicU64::new(1),
                    known: Mutex::new(None),
                }
            }; SLOTS],
        )
    }

    /// No stamp yet, nothing known (loom's types are not `const`).
    #[cfg(handles_cuda_loom)]
    pub(crate) fn new() -> Self {
        Progress(std::array::from_fn(|_| Slot {
            stamps: AtomicU64::new(1),
            known: Mutex::new(None),
        }))
    }

    fn slot(&self, stream: StreamId) -> &Slot {
        // Streams are heap objects at least 16-byte aligned: the low bits carry nothing.
        &self.0[(stream.raw >> 4) % SLOTS]
    }

    /// The next stamp of `stream`'s slot: `SeqCst`, so that stamps order the calls made around
    /// them (module docs).
    fn stamp(&self, stream: StreamId) -> u64 {
        self.slot(stream).stamps.fetch_add(1, Ordering::SeqCst)
    }

    /// Whether `stream`'s records stamped `after` have completed, as far as is known.
    fn covers(&self, stream: StreamId, after: u64) -> bool {
        matches!(*lock(&self.slot(stream).known),
            Some(entry) if entry.stream == stream && after < entry.done_below)
    }

    /// A record of `stream` stamped `before` was seen complete.
    fn reached(&self, stream: StreamId, before: u64) {
        let mut known = lock(&self.slot(stream).known);
        match &mut *known {
            Some(entry) if entry.stream == stream => {
                entry.done_below = entry.done_below.max(before);
            }
            other => {
                *other = Some(Entry {
                    stream,
                    done_below: before,
                })
            }
        }
    }
}

/// The process's stamps and knowledge of streams.
#[cfg(not(handles_cuda_loom))]
pub(crate) static PROGRESS: Progress = Progress::new();
/// As above (loom's types are not `const`).
#[cfg(handles_cuda_loom)]
pub(crate) static PROGRESS: std::sync::LazyLock<Progress> = std::sync::LazyLock::new(Progress::new);

/// An event's latest record, stamped, when stream order can speak for it.
#[derive(Clone, Copy)]
struct Stamped {
    stream: StreamId,
    before: u64,
    after: u64,
}

#[derive(Default)]
struct State {
    /// Bumped by every record that begins.
    version: u64,
    /// Records begun and not yet ended.
    recording: u32,
    /// The latest record's stamps, if no other record overlapped it.
    last: Option<Stamped>,
}

/// What is known of an event's latest record.
pub(crate) struct RecordStamps(Mutex<State>);

impl Default for RecordStamps {
    /// An event never recorded: nothing known.
    fn default() -> Self {
        RecordStamps(Mutex::new(State::default()))
    }
}

/// A record in progress: [`RecordStamps::end`] must follow the driver call.
pub(crate) struct Recording {
    version: u64,
    /// No other record of the event was in flight when this one began.
    alone: bool,
    stamped: Option<(StreamId, u64)>,
}

/// What the host knows of an event's latest record before it asks the driver.
pub(crate) enum Known {
    /// Completed: stream order proves it, no driver call is needed.
    Complete,
    /// Unknown; if the driver says it completed, [`RecordStamps::completed`] with this.
    Ask(u64),
    /// Unknown, and its completion proves nothing of its stream.
    Unstamped,
}

impl RecordStamps {
    /// A record of the event is about to be made on `stream` (`None`: a stream whose records
    /// are not stamped). Takes the `before` stamp.
    pub(crate) fn begin(&self, progress: &Progress, stream: Option<StreamId>) -> Recording {
        let mut state = lock(&self.0);
        state.version += 1;
        let alone = state.recording == 0;
        state.recording += 1;
        state.last = None;
        Recording {
            version: state.version,
            alone,
            stamped: stream.map(|stream| (stream, progress.stamp(stream))),
        }
    }

    /// The record begun with `recording` returned, `recorded` saying whether the driver made
    /// it. It leaves stamps only if it succeeded and no other record of the event overlapped
    /// it: none was in flight when it began, and none began since (the other's call might have
    /// reached the driver first or last).
    pub(crate) fn end(&self, progress: &Progress, recording: Recording, recorded: bool) {
        // Taken before the lock: the call has returned, and the lock adds nothing to that.
        let after = recording
            .stamped
            .map(|(stream, before)| (stream, before, progress.stamp(stream)));
        let mut state = lock(&self.0);
        state.recording -= 1;
        state.last = None;
        if recorded
            && recording.alone
            && state.version == recording.version
            && let Some((stream, before, after)) = after
        {
            state.last = Some(Stamped {
                stream,
                before,
                after,
            });
        }
    }

    /// The event may be recorded from now on in ways this module does not see (a graph's
    /// record node): its stamps go, and a wait begun before speaks for nothing.
    pub(crate) fn forget(&self) {
        let mut state = lock(&self.0);
        state.version += 1;
        state.last = None;
    }

    /// What is known of the latest record now, before the host asks the driver.
    pub(crate) fn known(&self, progress: &Progress) -> Known {
        let (version, last) = {
            let state = lock(&self.0);
            (state.version, state.last)
        };
        match last {
            // Complete as of the read above: a record begun since is a later one, which a
            // wait that begins now need not see.
            Some(last) if progress.covers(last.stream, last.after) => Known::Complete,
            Some(_) => Known::Ask(version),
            None => Known::Unstamped,
        }
    }

    /// The driver said the latest record completed, and [`Self::known`] had said
    /// [`Known::Ask`] with `version` before the call: if no record began since, every record
    /// of its stream stamped `after` below its `before` has completed too.
    pub(crate) fn completed(&self, progress: &Progress, version: u64) {
        let last = {
            let state = lock(&self.0);
            if state.version != version {
                return;
            }
            state.last
        };
        if let Some(last) = last {
            // The slot's lock orders this after the driver's answer for a thread that then
            // reads the entry and skips its wait.
            progress.reached(last.stream, last.before);
        }
    }
}
