//! What stream order already proves complete, so that a wait the host has in effect done is not
//! asked of the driver again (each `cuEventSynchronize` or `cuEventQuery` of a completed event
//! costs about 1.4 µs on driver 580, as much as a short copy).
//!
//! A stream this crate owns hands out *stamps* from one counter ([`StreamProgress`]): an event
//! recorded on it takes one just before `cuEventRecord` is called (`before`) and one once it
//! returned (`after`). If record A's `after` is below record B's `before`, A's call returned
//! before B's was made (the counter's read-modify-writes are totally ordered, and each carries
//! the happens-before of its thread), so the stream runs A before B. When the host sees B
//! complete (a synchronize or a query of B's event that returned "done"), it raises the stream's
//! `done_below` to B's `before`: every record whose `after` is below it has completed too.
//!
//! An event's stamps ([`RecordStamps`]) describe its latest record only while nothing else may
//! have recorded it: a record in flight (`recording`), two records that overlapped (neither
//! leaves stamps), a record that failed, or records this crate does not make (a graph's record
//! node, another process: the caller checks `RecordCount::uncounted` first) leave it without
//! stamps. A version, bumped by every record that begins, tells a waiter whether the record it
//! saw stamped before its driver call is still the latest after it. On its own so that
//! `tests/loom_stream_progress.rs` can model-check it against a simulated stream.

#[cfg(handles_cuda_loom)]
use loom::sync::{
    Mutex,
    atomic::{AtomicU64, Ordering},
};
use std::sync::Arc;
#[cfg(not(handles_cuda_loom))]
use std::sync::{
    Mutex,
    atomic::{AtomicU64, Ordering},
};

/// The stamps of one stream and how far it is known to have run.
#[derive(Debug)]
pub(crate) struct StreamProgress {
    /// The next stamp.
    stamps: AtomicU64,
    /// Every record whose `after` stamp is below this has completed.
    done_below: AtomicU64,
}

impl StreamProgress {
    /// A stream with no record yet.
    pub(crate) fn new() -> Self {
        StreamProgress {
            stamps: AtomicU64::new(1),
            done_below: AtomicU64::new(0),
        }
    }

    /// The next stamp: `SeqCst`, so that stamps order the calls made around them (module docs).
    fn stamp(&self) -> u64 {
        self.stamps.fetch_add(1, Ordering::SeqCst)
    }
}

/// An event's latest record, stamped, when stream order can speak for it.
struct Stamped {
    progress: Arc<StreamProgress>,
    before: u64,
    after: u64,
}

#[derive(Default)]
struct State {
    /// Bumped by every record that begins.
    version: u64,
    /// Records begun and not yet ended.
    recording: u32,
    /// The latest record's stamps, if it alone was recorded since the previous one ended.
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
    stamped: Option<(Arc<StreamProgress>, u64)>,
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

#[cfg(not(handles_cuda_loom))]
fn state(stamps: &RecordStamps) -> std::sync::MutexGuard<'_, State> {
    crate::sync::lock(&stamps.0)
}

#[cfg(handles_cuda_loom)]
fn state(stamps: &RecordStamps) -> loom::sync::MutexGuard<'_, State> {
    stamps.0.lock().unwrap()
}

impl RecordStamps {
    /// A record of the event is about to be made, on a stream with `progress` (`None`: a
    /// stream whose records are not stamped). Takes the `before` stamp.
    pub(crate) fn begin(&self, progress: Option<&Arc<StreamProgress>>) -> Recording {
        let mut state = state(self);
        state.version += 1;
        let alone = state.recording == 0;
        state.recording += 1;
        state.last = None;
        Recording {
            version: state.version,
            alone,
            stamped: progress.map(|progress| (progress.clone(), progress.stamp())),
        }
    }

    /// The record begun with `recording` returned, `recorded` saying whether the driver made
    /// it. It leaves stamps only if it succeeded and no other record of the event overlapped
    /// it: none was in flight when it began, and none began since (the other's call might have
    /// reached the driver first or last).
    pub(crate) fn end(&self, recording: Recording, recorded: bool) {
        // Taken before the lock: the call has returned, and the lock adds nothing to that.
        let after = recording
            .stamped
            .as_ref()
            .map(|(progress, _)| progress.stamp());
        let mut state = state(self);
        state.recording -= 1;
        state.last = None;
        if recorded
            && recording.alone
            && state.version == recording.version
            && let (Some((progress, before)), Some(after)) = (recording.stamped, after)
        {
            state.last = Some(Stamped {
                progress,
                before,
                after,
            });
        }
    }

    /// What is known of the latest record now, before the host asks the driver.
    pub(crate) fn known(&self) -> Known {
        let state = state(self);
        match &state.last {
            Some(_) if state.recording != 0 => Known::Unstamped,
            Some(last) if last.after < last.progress.done_below.load(Ordering::Acquire) => {
                Known::Complete
            }
            Some(_) => Known::Ask(state.version),
            None => Known::Unstamped,
        }
    }

    /// The driver said the latest record completed, and [`Self::known`] had said
    /// [`Known::Ask`] with `version` before the call: if no record began since, every record
    /// of its stream stamped `after` below its `before` has completed too.
    pub(crate) fn completed(&self, version: u64) {
        let state = state(self);
        if state.version == version
            && let Some(last) = &state.last
        {
            // Release: a thread that reads this and skips its wait sees what this one's wait
            // made visible.
            last.progress
                .done_below
                .fetch_max(last.before, Ordering::Release);
        }
    }
}

#[cfg(handles_cuda_loom)]
impl RecordStamps {
    /// The state, for a model's failure message.
    pub(crate) fn describe(&self) -> String {
        let state = state(self);
        match &state.last {
            Some(last) => format!(
                "version {} recording {} last before {} after {} (done below {})",
                state.version,
                state.recording,
                last.before,
                last.after,
                last.progress.done_below.load(Ordering::SeqCst)
            ),
            None => format!(
                "version {} recording {} no stamps",
                state.version, state.recording
            ),
        }
    }
}
