//! The race detector: a vector clock per timeline (the host, and every stream), the uses of
//! each allocation, and the violations found.

/// The host's timeline: what the program has synchronised with.
pub const HOST: usize = 0;

/// A vector clock, indexed by timeline.
pub type Clock = Vec<u64>;

/// `into = max(into, other)` element-wise.
pub fn join(into: &mut Clock, other: &Clock) {
    if into.len() < other.len() {
        into.resize(other.len(), 0);
    }
    for (mine, theirs) in into.iter_mut().zip(other) {
        *mine = (*mine).max(*theirs);
    }
}

/// Whether the event `(timeline, epoch)` happened before a point with clock `clock`.
pub fn covers(clock: &Clock, timeline: usize, epoch: u64) -> bool {
    clock.get(timeline).copied().unwrap_or(0) >= epoch
}

/// A point of a timeline, captured (by an event record, the end of a graph launch): what
/// happened before it, and when it was reached in logical time.
#[derive(Clone, Debug, Default)]
pub struct Stamp {
    pub clock: Clock,
    pub time: u64,
}

impl Stamp {
    /// `into` (a timeline or another stamp) is ordered after this point.
    fn join_into(&self, into: &mut Timeline) {
        join(&mut into.clock, &self.clock);
        into.time = into.time.max(self.time);
    }

    /// This point is ordered after `other` too (`max` of clocks and of times).
    pub fn join(&mut self, other: &Stamp) {
        join(&mut self.clock, &other.clock);
        self.time = self.time.max(other.time);
    }
}

std::thread_local! {
    /// How far in logical time this host thread has seen the device's work (its waits and
    /// synchronisations): the earliest its next operation can start. Per thread, as a GPU's
    /// streams fed by two threads are: one thread's wait does not delay another's work.
    static HOST_TIME: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// This host thread's logical time (see `HOST_TIME`).
pub fn host_time() -> u64 {
    HOST_TIME.try_with(std::cell::Cell::get).unwrap_or(0)
}

/// One sequence of work: the host, or a stream.
#[derive(Clone, Debug)]
pub struct Timeline {
    pub clock: Clock,
    pub label: String,
    /// Logical time, in nanoseconds: when the timeline's last operation ends. It travels with
    /// every join of the clock, so work on unordered streams overlaps and events time what a
    /// GPU would; no verdict reads it. Unused for the host, whose time is each thread's own
    /// ([`host_time`]).
    pub time: u64,
}

/// Which node of which graph launch an operation is: within one launch, nodes are ordered
/// only by the graph's edges (`races`), though they run one after the other here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeTag {
    /// The launch, numbered by `Races::register_launch`.
    pub launch: u64,
    /// The node's index in the executable graph.
    pub node: u32,
}

/// One use of an allocation: on which timeline, at which epoch, by which call, and (for device
/// work) on which device it runs. The device is that of the context the work runs in, which
/// for a graph's nodes is the graph's context, whatever the launch stream's
/// (`Sim::enqueue`); `None` for the host's operations.
#[derive(Clone, Copy, Debug)]
pub struct Use {
    pub timeline: usize,
    pub epoch: u64,
    pub call: &'static str,
    pub seq: u64,
    pub device: Option<usize>,
    /// The graph node it runs as, when it is one of a launch whose edges order its nodes.
    pub node: Option<NodeTag>,
}

pub use crate::order::verdict::Violation;

/// Timelines and violations.
pub struct Checker {
    pub timelines: Vec<Timeline>,
    pub violations: Vec<Violation>,
    strict: bool,
}

impl Checker {
    pub fn new(strict: bool) -> Checker {
        Checker {
            timelines: vec![Timeline {
                clock: vec![0],
                label: "host".into(),
                time: 0,
            }],
            violations: Vec::new(),
            strict,
        }
    }

    /// A new timeline, ordered after everything the host has seen.
    pub fn timeline(&mut self, label: String) -> usize {
        let index = self.timelines.len();
        let mut clock = self.timelines[HOST].clock.clone();
        clock.resize(index + 1, 0);
        let time = host_time();
        self.timelines.push(Timeline { clock, label, time });
        index
    }

    /// Orders the next operation of `timeline` after the host's knowledge and after the
    /// timelines in `implicit` (the legacy default stream's implicit synchronisation), ticks
    /// it, and returns the operation's use record.
    pub fn enqueue(&mut self, timeline: usize, implicit: &[usize]) -> Use {
        let host = self.timelines[HOST].clock.clone();
        let mut clock = std::mem::take(&mut self.timelines[timeline].clock);
        join(&mut clock, &host);
        let mut time = self.timelines[timeline].time.max(host_time());
        for &other in implicit {
            if other != timeline {
                join(&mut clock, &self.timelines[other].clock);
                time = time.max(self.timelines[other].time);
            }
        }
        self.timelines[timeline].time = time;
        if clock.len() <= timeline {
            clock.resize(timeline + 1, 0);
        }
        clock[timeline] += 1;
        let epoch = clock[timeline];
        self.timelines[timeline].clock = clock;
        let (call, seq) = crate::base::calls::current_call();
        Use {
            timeline,
            epoch,
            call,
            seq,
            device: None,
            node: None,
        }
    }

    /// A host-side operation: ticks the host's own entry.
    pub fn host_op(&mut self) -> Use {
        self.enqueue(HOST, &[])
    }

    /// The host waits for `timeline` (a synchronize that returned).
    pub fn host_waits(&mut self, timeline: usize) {
        let stamp = self.stamp(timeline);
        self.host_waits_stamp(&stamp);
    }

    /// The host waits for a captured point (an event).
    pub fn host_waits_stamp(&mut self, stamp: &Stamp) {
        self.wait_stamp(HOST, stamp);
    }

    /// `timeline` waits for a captured point (`cuStreamWaitEvent`).
    pub fn wait_stamp(&mut self, timeline: usize, stamp: &Stamp) {
        stamp.join_into(&mut self.timelines[timeline]);
        if timeline == HOST {
            let _ = HOST_TIME.try_with(|time| time.set(time.get().max(stamp.time)));
        }
    }

    /// `timeline`'s point now: its clock and logical time.
    pub fn stamp(&self, timeline: usize) -> Stamp {
        Stamp {
            clock: self.timelines[timeline].clock.clone(),
            time: if timeline == HOST {
                host_time()
            } else {
                self.timelines[timeline].time
            },
        }
    }

    /// `timeline`'s current operation lasts `nanoseconds` more (logical time).
    pub fn advance(&mut self, timeline: usize, nanoseconds: u64) {
        let time = &mut self.timelines[timeline].time;
        *time = time.saturating_add(nanoseconds);
    }

    pub fn clock(&self, timeline: usize) -> &Clock {
        &self.timelines[timeline].clock
    }

    pub fn label(&self, timeline: usize) -> &str {
        &self.timelines[timeline].label
    }

    /// Reports a violation: one line on stderr, kept for the report; aborts in strict mode.
    pub fn violation(&mut self, kind: &'static str, message: String) {
        let (call, seq) = crate::base::calls::current_call();
        let line = format!("cuda-sim: violation {kind}: {message} (in {call}, call #{seq})");
        eprintln!("{line}");
        self.violations.push(Violation {
            kind,
            message,
            call,
            seq,
        });
        if self.strict {
            crate::order::verdict::write_before_abort(&self.violations);
            std::process::abort();
        }
    }
}
