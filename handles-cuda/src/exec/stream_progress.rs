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
//! A waiter learns from the driver's answer only if the record it saw stamped before its
//! driver call is still the latest after it: every record that begins clears the stamps, and
//! stamps never repeat. An event's stamps take no lock: one state word (records in flight, a
//! version, whether stamps are published) and a sequence lock on the stamps. On its own so that
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

/// An event's latest record, stamped, when stream order can speak for it. Its stamps name the
/// record: a slot's counter never repeats a value, and two slots hold different addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamped {
    stream: StreamId,
    before: u64,
    after: u64,
}

/// [`RecordStamps`]' state word: the records begun (the low [`RECORDING_BITS`] bits count
/// those in flight), whether the latest one left stamps ([`HAS_LAST`]), and a version
/// bumped by every record that begins and by [`RecordStamps::forget`] (the bits above).
const RECORDING_BITS: u32 = 15;
const RECORDING: u64 = (1 << RECORDING_BITS) - 1;
const HAS_LAST: u64 = 1 << RECORDING_BITS;
const VERSION_ONE: u64 = HAS_LAST << 1;

/// What is known of an event's latest record, without a lock: one state word, and the
/// latest record's stamps, which only the record that leaves them writes (while the word
/// says "none"), and which a reader takes as valid only if the word did not change while it
/// read them (a sequence lock).
///
/// The version is 48 bits wide. A record publishes its stamps only if the word still holds
/// what its own begin left: that version, itself the one record in flight. A wrong
/// publication would need a multiple of 2^48 other records of the event to begin between its
/// `begin` and its `end`, every one of them ended again by then: about nine years of
/// back-to-back records at 1 µs each (a `forget` bumps the version too, but leaves the event
/// uncounted for good, so no wait asks the stamps again). A reader's check that the word did
/// not change has the same bound. [`RecordStamps::completed`] does not use the version: it
/// compares the record itself.
pub(crate) struct RecordStamps {
    word: AtomicU64,
    raw: AtomicU64,
    generation: AtomicU64,
    before: AtomicU64,
    after: AtomicU64,
}

impl Default for RecordStamps {
    /// An event never recorded: nothing known.
    fn default() -> Self {
        RecordStamps {
            word: AtomicU64::new(0),
            raw: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            before: AtomicU64::new(0),
            after: AtomicU64::new(0),
        }
    }
}

/// A record in progress: [`Recording::end`] follows the driver call. Dropped without it (a
/// panic between the two), it ends as a failed record, so that the event's count of records in
/// flight never keeps it.
pub(crate) struct Recording<'a> {
    stamps: &'a RecordStamps,
    progress: &'a Progress,
    /// The state word this record's begin left (its version, one more in flight, no stamps).
    word: u64,
    /// No other record of the event was in flight when this one began.
    alone: bool,
    stamped: Option<(StreamId, u64)>,
    ended: bool,
}

impl Recording<'_> {
    /// The driver call returned, `recorded` saying whether it made the record. It leaves
    /// stamps only if it succeeded and no other record of the event overlapped it: none was in
    /// flight when it began, and none began since (the other's call might have reached the
    /// driver first or last).
    pub(crate) fn end(mut self, recorded: bool) {
        self.ended = true;
        self.stamps.end(self.progress, &self, recorded);
    }
}

impl Drop for Recording<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.stamps.end(self.progress, self, false);
        }
    }
}

/// What the host knows of an event's latest record before it asks the driver.
pub(crate) enum Known {
    /// Completed: stream order proves it, no driver call is needed.
    Complete,
    /// Unknown; if the driver says it completed, [`RecordStamps::completed`] with this.
    Ask(Stamped),
    /// Unknown, and its completion proves nothing of its stream.
    Unstamped,
}

impl RecordStamps {
    /// A record of the event is about to be made on `stream` (`None`: a stream whose records
    /// are not stamped). Takes the `before` stamp.
    pub(crate) fn begin<'a>(
        &'a self,
        progress: &'a Progress,
        stream: Option<StreamId>,
    ) -> Recording<'a> {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            if word & RECORDING == RECORDING {
                // 32,767 records of this one event in flight: wait for one to end.
                #[cfg(not(handles_cuda_loom))]
                std::thread::yield_now();
                #[cfg(handles_cuda_loom)]
                loom::thread::yield_now();
                word = self.word.load(Ordering::Relaxed);
                continue;
            }
            // A new version, one more in flight, and no stamps: the latest record is now this
            // one, whose stamps are not yet known.
            let next = (word & !(RECORDING | HAS_LAST)).wrapping_add(VERSION_ONE)
                | ((word & RECORDING) + 1);
            match self
                .word
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    return Recording {
                        stamps: self,
                        progress,
                        ended: false,
                        word: next,
                        alone: word & RECORDING == 0,
                        stamped: stream.map(|stream| (stream, progress.stamp(stream))),
                    };
                }
                Err(now) => word = now,
            }
        }
    }

    /// [`Recording::end`], and a recording dropped without it (as failed).
    fn end(&self, progress: &Progress, recording: &Recording<'_>, recorded: bool) {
        if recorded
            && recording.alone
            && let Some((stream, before)) = recording.stamped
            // Still the one record in flight, and none began since (nor a `forget`).
            && self.word.load(Ordering::Relaxed) == recording.word
        {
            // No stamps are published while this record is in flight (the word says "none"
            // until the exchange below), so no reader takes these as valid until then; a reader
            // that sees any of these stores sees the begin before them, which changed the word
            // it read first (release stores, acquire loads).
            let after = progress.stamp(stream);
            self.raw.store(stream.raw as u64, Ordering::Release);
            self.generation.store(stream.generation, Ordering::Release);
            self.before.store(before, Ordering::Release);
            self.after.store(after, Ordering::Release);
            let published = (recording.word & !RECORDING) | HAS_LAST;
            if self
                .word
                .compare_exchange(
                    recording.word,
                    published,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return;
            }
        }
        // One fewer in flight. No stamps were published since this record began (only a record
        // alone in flight publishes, and this one was in flight).
        self.word.fetch_sub(1, Ordering::AcqRel);
    }

    /// The event may be recorded from now on in ways this module does not see (a graph's
    /// record node): its stamps go, and a wait begun before speaks for nothing.
    pub(crate) fn forget(&self) {
        let _ = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |word| {
                Some((word & !HAS_LAST).wrapping_add(VERSION_ONE))
            });
    }

    /// The latest record's stamps, if it left them, as one consistent read.
    pub(crate) fn last(&self) -> Option<Stamped> {
        let word = self.word.load(Ordering::Acquire);
        if word & HAS_LAST == 0 {
            return None;
        }
        let last = Stamped {
            stream: StreamId {
                raw: self.raw.load(Ordering::Acquire) as usize,
                generation: self.generation.load(Ordering::Acquire),
            },
            before: self.before.load(Ordering::Acquire),
            after: self.after.load(Ordering::Acquire),
        };
        // Unchanged: the stamps read are the ones published with `word` (a newer record's
        // stores, seen by a load above, would make this load see that record's begin).
        (self.word.load(Ordering::Acquire) == word).then_some(last)
    }

    /// What is known of the latest record now, before the host asks the driver.
    pub(crate) fn known(&self, progress: &Progress) -> Known {
        match self.last() {
            // Complete as of the read above: a record begun since is a later one, which a
            // wait that begins now need not see.
            Some(last) if progress.covers(last.stream, last.after) => Known::Complete,
            Some(last) => Known::Ask(last),
            None => Known::Unstamped,
        }
    }

    /// The driver said the latest record completed, and [`Self::known`] had said
    /// [`Known::Ask`] with `asked` before the call: if that record is still the latest (no
    /// record began since: each one clears the stamps, and stamps never repeat), every record
    /// of its stream stamped `after` below its `before` has completed too.
    pub(crate) fn completed(&self, progress: &Progress, asked: Stamped) {
        if self.last() == Some(asked) {
            // The slot's lock orders this after the driver's answer for a thread that then
            // reads the entry and skips its wait.
            progress.reached(asked.stream, asked.before);
        }
    }
}

#[cfg(all(test, not(handles_cuda_loom)))]
mod tests {
    use super::*;

    const STREAM: StreamId = StreamId {
        raw: 0x1000,
        generation: 0,
    };

    fn recorded(stamps: &RecordStamps, progress: &Progress, ok: bool) {
        stamps.begin(progress, Some(STREAM)).end(ok);
    }

    #[test]
    fn a_record_seen_complete_speaks_for_the_earlier_ones_of_its_stream() {
        let progress = Progress::new();
        let (first, second) = (RecordStamps::default(), RecordStamps::default());
        recorded(&first, &progress, true);
        recorded(&second, &progress, true);
        assert!(matches!(first.known(&progress), Known::Ask(_)));
        let Known::Ask(asked) = second.known(&progress) else {
            panic!("a stamped record not seen complete is asked for");
        };
        second.completed(&progress, asked);
        assert!(matches!(first.known(&progress), Known::Complete));
    }

    #[test]
    fn a_failed_or_overlapping_record_or_a_forget_leaves_no_stamps() {
        let progress = Progress::new();
        let stamps = RecordStamps::default();
        recorded(&stamps, &progress, false);
        assert!(stamps.last().is_none());
        let outer = stamps.begin(&progress, Some(STREAM));
        recorded(&stamps, &progress, true);
        assert!(
            stamps.last().is_none(),
            "a record overlapping another left stamps"
        );
        outer.end(true);
        assert!(
            stamps.last().is_none(),
            "a record another overlapped left stamps"
        );
        recorded(&stamps, &progress, true);
        let Known::Ask(asked) = stamps.known(&progress) else {
            panic!("a record alone leaves stamps");
        };
        stamps.forget();
        assert!(stamps.last().is_none());
        // An answer about the record before the forget speaks for nothing.
        stamps.completed(&progress, asked);
        recorded(&stamps, &progress, true);
        assert!(matches!(stamps.known(&progress), Known::Ask(_)));
    }

    #[test]
    fn a_recording_dropped_without_its_end_ends_as_failed() {
        let progress = Progress::new();
        let stamps = RecordStamps::default();
        drop(stamps.begin(&progress, Some(STREAM)));
        assert_eq!(stamps.word.load(Ordering::Relaxed) & RECORDING, 0);
        assert!(stamps.last().is_none());
        stamps.begin(&progress, Some(STREAM)).end(true);
        assert!(
            stamps.last().is_some(),
            "a later record alone leaves stamps"
        );
    }

    #[test]
    fn threads_recording_and_reading_one_event_leave_a_consistent_word() {
        let progress = Progress::new();
        let stamps = RecordStamps::default();
        let rounds = if cfg!(miri) { 20 } else { 2000 };
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let (progress, stamps) = (&progress, &stamps);
                scope.spawn(move || {
                    for round in 0..rounds {
                        recorded(stamps, progress, (round + thread) % 3 != 0);
                        if let Known::Ask(asked) = stamps.known(progress) {
                            stamps.completed(progress, asked);
                        }
                    }
                });
            }
        });
        let word = stamps.word.load(Ordering::Relaxed);
        assert_eq!(word & RECORDING, 0, "records still counted in flight");
        assert_eq!(
            word >> (RECORDING_BITS + 1),
            4 * rounds as u64,
            "one version per record"
        );
    }
}
