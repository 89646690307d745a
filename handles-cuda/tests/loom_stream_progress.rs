//! Model check of the stamps that let a wait be skipped (`exec/stream_progress.rs`), against a
//! simulated stream: records are enqueued in the order their calls reach the "driver" (a
//! mutex), a synchronize completes the stream up to the event's latest record at the time of
//! the call, and whenever the stamps say an event's latest record has completed, it has.
//! Two recorders of one event overlap with a third thread that records and waits for another
//! event. Run with `RUSTFLAGS="--cfg handles_cuda_loom" cargo test -p handles-cuda --test
//! loom_stream_progress --release`.
#![cfg(handles_cuda_loom)]

#[path = "../src/exec/stream_progress.rs"]
#[allow(dead_code)]
mod stream_progress;

use loom::sync::Mutex;
use std::sync::Arc;
use stream_progress::{Known, Progress, RecordStamps, StreamId};

/// The one stream of the model.
const STREAM: StreamId = StreamId {
    raw: 0x1000,
    generation: 0,
};

/// Where an event's latest record is: on the stream (an index into `queue`), or on another
/// stream, recorded without stamps (a launch's programmatic event, a graph's record node).
#[derive(Clone, Copy)]
enum Place {
    Stream(usize),
    Elsewhere,
}

/// The simulated driver: one stream's records in order, how many have completed, and each
/// event's latest record. Work elsewhere completes at once.
#[derive(Default)]
struct Driver {
    queue: Vec<usize>,
    completed: usize,
    latest: [Option<Place>; 2],
}

struct World {
    driver: Mutex<Driver>,
    progress: Progress,
    stamps: [RecordStamps; 2],
}

impl World {
    fn record(&self, event: usize) {
        let recording = self.stamps[event].begin(&self.progress, Some(STREAM));
        {
            let mut driver = self.driver.lock().unwrap();
            driver.queue.push(event);
            let at = driver.queue.len() - 1;
            driver.latest[event] = Some(Place::Stream(at));
        }
        recording.end(true);
    }

    /// A record of `event` on another stream this crate owns (stamped there), which the
    /// driver runs at once: its completion says nothing of `STREAM`.
    fn record_on_other_stream(&self, event: usize) {
        let other = StreamId {
            raw: STREAM.raw + 16,
            generation: 0,
        };
        let recording = self.stamps[event].begin(&self.progress, Some(other));
        self.driver.lock().unwrap().latest[event] = Some(Place::Elsewhere);
        recording.end(true);
    }

    /// A record of `event` on another stream, made as `EventHandle::before_other_record`
    /// brackets it: no stream, so no stamps.
    fn record_elsewhere(&self, event: usize) {
        let recording = self.stamps[event].begin(&self.progress, None);
        self.driver.lock().unwrap().latest[event] = Some(Place::Elsewhere);
        recording.end(false);
    }

    /// A record node added for `event` (`before_uncounted_records`: the stamps go, then the
    /// count says "uncounted", which `known` is not asked about again here), and recorded
    /// elsewhere by the graph's launch.
    fn record_node(&self, event: usize) {
        self.stamps[event].forget();
        self.driver.lock().unwrap().latest[event] = Some(Place::Elsewhere);
    }

    /// `synchronize`: skipped when the stamps say so, else the driver waits (completing the
    /// stream up to the latest record) and the stamps learn of it.
    fn synchronize(&self, event: usize) {
        let known = self.known(event);
        if let Known::Complete = known {
            return;
        }
        {
            let mut driver = self.driver.lock().unwrap();
            if let Some(Place::Stream(at)) = driver.latest[event] {
                driver.completed = driver.completed.max(at + 1);
            }
        }
        if let Known::Ask(version) = known {
            self.stamps[event].completed(&self.progress, version);
        }
    }

    /// What the stamps say of `event`, checked against the driver while no record can reach it:
    /// "complete" must mean that its latest record has run.
    fn known(&self, event: usize) -> Known {
        let driver = self.driver.lock().unwrap();
        let known = self.stamps[event].known(&self.progress);
        if let (Known::Complete, Some(Place::Stream(at))) = (&known, driver.latest[event]) {
            assert!(
                at < driver.completed,
                "event {event}'s latest record (#{at}) was called complete, but only {} of {:?} ran",
                driver.completed,
                driver.queue
            );
        }
        known
    }
}

/// At most three preemptions.
fn builder() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder
}

fn world() -> Arc<World> {
    Arc::new(World {
        driver: Mutex::new(Driver::default()),
        progress: Progress::new(),
        stamps: [RecordStamps::default(), RecordStamps::default()],
    })
}

#[test]
fn a_skipped_wait_is_never_for_a_record_still_running() {
    builder().check(|| {
        let world = world();
        // The marker's use, recorded before the request's event.
        world.record(0);
        let rerecord = {
            let world = world.clone();
            loom::thread::spawn(move || world.record(0))
        };
        let request = {
            let world = world.clone();
            loom::thread::spawn(move || {
                world.record(1);
                world.synchronize(1);
            })
        };
        world.known(0);
        rerecord.join().unwrap();
        request.join().unwrap();
        world.synchronize(0);
    });
}

#[test]
fn a_wait_after_a_later_one_is_skipped() {
    builder().check(|| {
        let world = world();
        world.record(0);
        world.record(1);
        let waiter = {
            let world = world.clone();
            loom::thread::spawn(move || world.synchronize(1))
        };
        waiter.join().unwrap();
        assert!(matches!(world.known(0), Known::Complete));
        world.synchronize(0);
    });
}

#[test]
fn overlapping_records_leave_no_stamps() {
    builder().check(|| {
        let world = world();
        let recorders: Vec<_> = [0, 0, 1]
            .into_iter()
            .map(|event| {
                let world = world.clone();
                loom::thread::spawn(move || {
                    world.record(event);
                    if event == 1 {
                        world.synchronize(1);
                    }
                })
            })
            .collect();
        for recorder in recorders {
            recorder.join().unwrap();
        }
        world.known(0);
    });
}

#[test]
fn a_wait_speaks_only_for_the_record_it_waited_for() {
    builder().check(|| {
        let world = world();
        world.record(1);
        let later = {
            let world = world.clone();
            loom::thread::spawn(move || {
                world.record(0);
                world.record(1);
            })
        };
        world.synchronize(1);
        later.join().unwrap();
        world.known(0);
    });
}

#[test]
fn another_stream_of_the_slot_or_a_later_generation_proves_nothing() {
    builder().check(|| {
        let progress = Progress::new();
        let mut spoke = Vec::new();
        // The same slot (the address differs in bits above the slot's), and the same address
        // in its next generation.
        for other in [
            StreamId {
                raw: STREAM.raw + 16 * stream_progress::SLOTS,
                generation: 0,
            },
            StreamId {
                raw: STREAM.raw,
                generation: 1,
            },
        ] {
            let (marker, event) = (RecordStamps::default(), RecordStamps::default());
            let recording = marker.begin(&progress, Some(STREAM));
            recording.end(true);
            let recording = event.begin(&progress, Some(other));
            recording.end(true);
            let Known::Ask(version) = event.known(&progress) else {
                panic!("a stamped record not yet seen complete must be asked for");
            };
            event.completed(&progress, version);
            spoke.push((other, !matches!(marker.known(&progress), Known::Ask(_))));
        }
        // Asserted once every loom object is dropped: a panic while they live hangs loom.
        drop(progress);
        for (other, spoke) in spoke {
            assert!(!spoke, "{other:?}'s completion spoke for {STREAM:?}");
        }
    });
}

#[test]
fn a_record_elsewhere_or_a_record_node_speaks_for_nothing() {
    builder().check(|| {
        for node in [false, true] {
            let world = world();
            // The marker's use, then the event, both on the stream, which has not run.
            world.record(0);
            world.record(1);
            let elsewhere = {
                let world = world.clone();
                loom::thread::spawn(move || {
                    if node {
                        world.record_node(1)
                    } else {
                        world.record_elsewhere(1)
                    }
                })
            };
            // A wait for the event that may see the record made elsewhere.
            world.synchronize(1);
            elsewhere.join().unwrap();
            world.synchronize(1);
            world.known(0);
        }
    });
}

#[test]
fn a_reader_never_mixes_two_records_stamps() {
    builder().check(|| {
        let progress = Arc::new(Progress::new());
        let stamps = Arc::new(RecordStamps::default());
        let recording = stamps.begin(&progress, Some(STREAM));
        recording.end(true);
        let first = stamps.last();
        // A second record, on another stream of another slot and generation, republishes
        // while this thread reads: it must read the first record's stamps, the second's, or
        // none, never parts of both.
        let writer = {
            let (progress, stamps) = (progress.clone(), stamps.clone());
            loom::thread::spawn(move || {
                // The same slot (so both records' stamps come from one counter) in another
                // generation: a mix of the two would show in every field.
                let other = StreamId {
                    raw: STREAM.raw + 16 * stream_progress::SLOTS,
                    generation: 7,
                };
                let recording = stamps.begin(&progress, Some(other));
                recording.end(true);
            })
        };
        let seen = stamps.last();
        writer.join().unwrap();
        let second = stamps.last();
        let whole = seen.is_none() || seen == first || seen == second;
        let published = first.is_some() && second.is_some() && first != second;
        // Asserted once every loom object is dropped: a panic while they live hangs loom.
        drop((progress, stamps));
        assert!(published, "both records left stamps");
        assert!(whole, "read {seen:?}: neither {first:?} nor {second:?}");
    });
}

#[test]
fn an_answer_about_a_record_on_another_stream_speaks_for_nothing() {
    builder().check(|| {
        let world = world();
        // The marker's use, then the event, both on the stream, which has not run.
        world.record(0);
        world.record(1);
        // The event recorded again on another stream while a wait for it begins: the driver's
        // answer may be about that record, which proves nothing of the first stream.
        let again = {
            let world = world.clone();
            loom::thread::spawn(move || world.record_on_other_stream(1))
        };
        world.synchronize(1);
        again.join().unwrap();
        world.known(0);
    });
}
