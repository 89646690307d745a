//! The child's side: runs a [`Program`] on the simulated driver through handles-cuda's safe
//! API, printing each call as a line of Rust (`fuzz-trace:`), every report-hook line
//! (`fuzz-report:`), every `Error::InvalidArgument` the library returned (`fuzz-string-error:`)
//! and every failure it sees itself (`fuzz-fail:`): a panic that escaped from the library, a
//! completion that stays pending after its event completed, a use accepted under a live host
//! view. The simulator's report (violations, leaks) is read by the parent.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io::Write as _;
use std::os::fd::AsFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context as TaskContext, Wake, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use handles_core::ResourceHandle;
use handles_cuda::code::{
    Buffer, Conditional, Im2colTensor, KernelAttribute, OccupancyFlags, SharedPerBlock, TensorMap,
    TiledTensor, TypedKernel,
};
use handles_cuda::exec::{
    Completion, EventFlags, EventRecycler, GreenContextHandle, GreenContextWeak, RecycledEvent,
    RecycledStream, StreamRecycler,
};
use handles_cuda::graph::{
    CaptureMode, ConditionalHandle, ConditionalKind, GraphExecHandle, GraphHandle, GraphNode,
};
use handles_cuda::interop::cudarc::driver::CudaContext;
use handles_cuda::memory::{
    AddressReservationHandle, Advice, Attach, BatchCopy, GrowableBuffer, MappingHandle,
    PhysicalAllocationHandle, PoolLocation, Sharing, granularity,
};
use handles_cuda::{
    ContextHandle, DeviceBuffer, DevicePtrHandle, Error, EventHandle, LaunchConfig,
    MemoryPoolHandle, PoolProps, StreamFlags, StreamHandle,
};

use super::program::{
    AttachKind, AttrSel, CaptureBody, CondKind, Ending, HostBody, KernelSel, Mode, Op, PerBlock,
    PoolKind, PrimaryBody, Program, RunBody, ThreadJob, ViewInner,
};

/// The payload of every panic a program raises on purpose in a user closure or a record's
/// `Drop`. Any other payload caught by the interpreter escaped from the library.
#[derive(Debug)]
pub struct UserPanic(pub &'static str);

/// Prints one line of the protocol and flushes it, so that it survives an abort.
pub fn emit(tag: &str, line: &str) {
    let mut out = std::io::stdout().lock();
    for part in line.lines() {
        let _ = writeln!(out, "{tag}: {part}");
    }
    let _ = out.flush();
}

/// Whether a caught panic was raised on purpose by the program (its payload is one of the
/// program's own: a [`UserPanic`] or a handle passed to `panic_any`).
pub fn is_user_panic(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<UserPanic>() || payload.is::<DevicePtrHandle>() || payload.is::<BombHandle>()
}

/// A panic payload as text.
pub fn describe_panic(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(user) = payload.downcast_ref::<UserPanic>() {
        format!("user panic ({})", user.0)
    } else if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else if payload.is::<DevicePtrHandle>() {
        "a DevicePtrHandle payload".into()
    } else {
        "a payload of another type".into()
    }
}

// Records whose `Drop` panics (F2): a handles-core resource declared here, like a user's.

/// A field whose `Drop` panics when armed.
pub struct Fuse(bool);

impl Drop for Fuse {
    fn drop(&mut self) {
        if self.0 {
            std::panic::panic_any(UserPanic("a record's Drop panicked"))
        }
    }
}

fn delete_bomb(_: u64, _: &Bomb) -> Result<(), std::io::Error> {
    Ok(())
}

/// A user's resource whose record panics when dropped, and may own a buffer.
#[derive(ResourceHandle)]
#[handle(raw = u64, delete = delete_bomb)]
pub struct Bomb {
    /// Panics when dropped, if armed.
    fuse: Fuse,
    /// A buffer the bomb keeps alive.
    #[owner]
    buffer: Option<DevicePtrHandle>,
    /// Another bomb it keeps alive (a chain of records that may panic).
    #[owner]
    next: Option<BombHandle>,
}

// SAFETY: a plain id; nothing is done with it from any thread.
unsafe impl handles_core::ThreadSafe for Bomb {}

/// A one-way gate a host function waits on, to hold a stream back until the program opens it
/// (or until [`GATE_LIMIT`] passes, so that no program hangs).
#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<bool>, Condvar)>);

/// The longest a host function waits on a closed gate.
const GATE_LIMIT: Duration = Duration::from_secs(4);

/// How long a completion may stay pending after its event completed.
const LIVENESS: Duration = Duration::from_secs(3);

/// How long a program waits for a completion whose event has not completed (held back by the
/// program itself) before it goes on without it.
const GIVE_UP: Duration = Duration::from_secs(1);

impl Gate {
    fn wait(&self) {
        let (open, changed) = &*self.0;
        let guard = open.lock().unwrap_or_else(|e| e.into_inner());
        let _ = changed.wait_timeout_while(guard, GATE_LIMIT, |open| !*open);
    }

    fn open(&self) {
        let (open, changed) = &*self.0;
        *open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        changed.notify_all();
    }
}

/// A context slot: the handle, and the green context it is a share of.
struct Ctx {
    handle: ContextHandle,
    green: Option<GreenContextHandle>,
}

/// A stream slot.
enum Strm {
    Owned(StreamHandle),
    Recycled(RecycledStream),
}

impl std::ops::Deref for Strm {
    type Target = StreamHandle;
    fn deref(&self) -> &StreamHandle {
        match self {
            Strm::Owned(stream) => stream,
            Strm::Recycled(stream) => stream,
        }
    }
}

/// An event slot: the event (owned or recycled) and its identity for the liveness check.
struct Ev {
    event: EvKind,
    id: u64,
}

enum EvKind {
    Owned(EventHandle),
    Recycled(RecycledEvent),
}

impl std::ops::Deref for Ev {
    type Target = EventHandle;
    fn deref(&self) -> &EventHandle {
        match &self.event {
            EvKind::Owned(event) => event,
            EvKind::Recycled(event) => event,
        }
    }
}

/// A completion slot: the future, its event, and the event's identity and record count when
/// the future was made.
struct Compl {
    future: Completion,
    event: EventHandle,
    id: u64,
    generation: u64,
}

/// `Ok` when `n` 32-bit elements fit in `buffer` and it is aligned for them.
fn words_fit(buffer: &DevicePtrHandle, n: u32) -> Result<(), Error> {
    if (n as usize) * 4 > buffer.size() {
        return Err(Error::InvalidArgument(format!(
            "{n} elements do not fit in a buffer of {} bytes",
            buffer.size()
        )));
    }
    if n > 0 && !buffer.as_cu().is_multiple_of(4) {
        return Err(Error::InvalidArgument(format!(
            "{n} elements do not fit in a buffer at the misaligned address {:#x}",
            buffer.as_cu()
        )));
    }
    Ok(())
}

/// The kernels of `tests/kernels/test_kernels.ptx`, typed with bounds checks that also require
/// the 4-byte alignment of their `u32` accesses (a view at an odd offset is refused by the
/// check, as a careful user's `typed` would refuse it).
pub struct Kernels {
    /// The library they come from.
    _library: handles_cuda::LibraryHandle,
    /// `dst[i] = value` for `i < n`.
    fill: TypedKernel<(Buffer, u32, u32)>,
    /// `data[i] += value` for `i < n`.
    add: TypedKernel<(Buffer, u32, u32)>,
    /// `dst[i] = src[i]` for `i < n`.
    copy: TypedKernel<(Buffer, Buffer, u32)>,
    /// `data[i] += 1` for `i < n`.
    add_one: TypedKernel<(Buffer, u32)>,
    /// Busy-waits; touches no memory.
    spin: TypedKernel<(u64,)>,
}

impl Kernels {
    fn load() -> Result<Kernels, Error> {
        let library = handles_cuda::LibraryHandle::load_ptx(handles_tests::kernels::PTX)?;
        let kernel = |name: &str| handles_cuda::KernelHandle::get(&library, name);
        // SAFETY: each signature is the kernel's PTX parameter list; each kernel touches only
        // `n` aligned 32-bit elements of its buffers, which the checks guarantee fit (`spin`
        // touches no memory and ends after its cycles).
        unsafe {
            Ok(Kernels {
                fill: kernel("fill_u32")?
                    .typed(|args: &(&DevicePtrHandle, u32, u32), _| words_fit(args.0, args.2))?,
                add: kernel("add_u32")?
                    .typed(|args: &(&DevicePtrHandle, u32, u32), _| words_fit(args.0, args.2))?,
                copy: kernel("copy_u32")?.typed(
                    |args: &(&DevicePtrHandle, &DevicePtrHandle, u32), _| {
                        words_fit(args.0, args.2).and(words_fit(args.1, args.2))
                    },
                )?,
                add_one: kernel("add_one")?
                    .typed(|args: &(&DevicePtrHandle, u32), _| words_fit(args.0, args.1))?,
                spin: kernel("spin")?.typed(|_, _| Ok(()))?,
                _library: library,
            })
        }
    }
}

/// The conditional-setting kernel, compiled with NVRTC on first use.
type SetFrom = TypedKernel<(Conditional, Buffer)>;

const SLOTS: usize = 3;
const GATES: usize = 2;
const THREADS: usize = 2;

/// The arena and everything the program made.
pub struct State {
    devices: usize,
    ctx: [Option<Ctx>; SLOTS],
    /// Every green context made, to wait for its work at the end (its handles may be gone
    /// while work queued in it still runs).
    greens: Vec<GreenContextWeak>,
    streams: [Option<Strm>; SLOTS],
    stream_recyclers: [Option<StreamRecycler>; SLOTS],
    events: [Option<Ev>; SLOTS],
    event_recyclers: [Option<EventRecycler>; SLOTS],
    completions: [Option<Compl>; SLOTS],
    many: Vec<Completion>,
    gates: [Gate; GATES],
    pools: [Option<MemoryPoolHandle>; SLOTS],
    bufs: [Option<DevicePtrHandle>; SLOTS],
    graphs: [Option<GraphHandle>; SLOTS],
    nodes: Vec<GraphNode>,
    conds: [Option<ConditionalHandle>; SLOTS],
    execs: [Option<GraphExecHandle>; SLOTS],
    threads: [Option<JoinHandle<()>>; THREADS],
    bombs: [Option<BombHandle>; SLOTS],
    kernels: Option<Kernels>,
    set_from: Option<(handles_cuda::LibraryHandle, SetFrom)>,
    next_id: u64,
    generations: HashMap<u64, u64>,
    tainted: HashSet<u64>,
    failed: bool,
}

/// The outcome of one op.
type Step = Result<(), Error>;

/// An op's own problem that is not a library error: an empty slot, say.
fn skip(why: &str) -> Step {
    emit("fuzz-trace", &format!("    // skipped: {why}"));
    Ok(())
}

fn say(line: impl AsRef<str>) {
    emit("fuzz-trace", line.as_ref());
}

fn fail(what: impl AsRef<str>) {
    emit("fuzz-fail", what.as_ref());
}

/// Notes an error the library returned: `InvalidArgument` strings are listed for the parent
/// (typed variants are the rule for refusals the library detects itself).
fn note_error(error: &Error) {
    if let Error::InvalidArgument(message) = error
        && !message.contains("do not fit in a buffer")
    {
        emit("fuzz-string-error", message);
    }
    if let Error::InBatch { cause, .. } = error {
        note_error(cause);
    }
}

fn idx(value: u8, n: usize) -> usize {
    value as usize % n
}

/// A waker whose `wake` panics: a user closure the driver's thread runs, through a
/// completion's host function.
struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        std::panic::panic_any(UserPanic("a waker panicked"))
    }
}

/// A waker that unparks the thread that polls.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

fn park_waker() -> Waker {
    Waker::from(Arc::new(Unpark(std::thread::current())))
}

/// What a bounded wait for a completion saw.
enum Awaited {
    Ready,
    /// Its event did not complete within the bound (held back by the program).
    GaveUp,
    /// Its event completed, and the future stayed pending for [`LIVENESS`] after.
    Stuck,
}

/// Polls `future` until it is ready; gives up after [`GIVE_UP`] unless `event` completed,
/// and reports `Stuck` if it stays pending for [`LIVENESS`] after `event` completed (when
/// `check` says the event was not recorded again since the future was made).
fn await_bounded(future: &mut Completion, event: &EventHandle, check: bool) -> Awaited {
    let waker = park_waker();
    let mut task = TaskContext::from_waker(&waker);
    let start = Instant::now();
    let mut completed_at: Option<Instant> = None;
    loop {
        if Pin::new(&mut *future).poll(&mut task).is_ready() {
            return Awaited::Ready;
        }
        if completed_at.is_none() && event.query().unwrap_or(false) {
            completed_at = Some(Instant::now());
        }
        match completed_at {
            Some(at) if check && at.elapsed() > LIVENESS => return Awaited::Stuck,
            Some(at) if !check && at.elapsed() > LIVENESS => return Awaited::GaveUp,
            None if start.elapsed() > GIVE_UP => return Awaited::GaveUp,
            _ => std::thread::park_timeout(Duration::from_millis(5)),
        }
    }
}

// The shared-memory functions of `potential_block_size` (plain `fn`s: what they act on is
// set in this thread-local before the call).

thread_local! {
    static REBIND_TO: std::cell::RefCell<Option<ContextHandle>> = const { std::cell::RefCell::new(None) };
}

fn per_warp(block: u32) -> usize {
    (block as usize).div_ceil(32) * 64
}

fn per_block_unbind(_: u32) -> usize {
    let _ = ContextHandle::unbind_thread();
    0
}

fn per_block_rebind(_: u32) -> usize {
    if let Some(context) = REBIND_TO.with(|slot| slot.borrow_mut().take()) {
        let _ = context.bind_to_thread();
    }
    0
}

fn per_block_stream(_: u32) -> usize {
    if let Ok(Some(context)) = ContextHandle::current() {
        let _ = StreamHandle::create(&context, StreamFlags::default(), 0);
    }
    0
}

fn per_block_clear(_: u32) -> usize {
    handles_cuda::exec::clear_primary_cache();
    0
}

fn per_block_panic(_: u32) -> usize {
    std::panic::panic_any(UserPanic("a shared-memory function panicked"))
}

fn user_error() -> Error {
    Error::NothingMade {
        what: "a user closure returned an error on purpose",
    }
}

fn render<T: std::fmt::Debug>(result: &Result<T, Error>) -> String {
    match result {
        Ok(value) => {
            let text = format!("{value:?}");
            if text.len() > 80 || text == "()" {
                "    // -> Ok".to_string()
            } else {
                format!("    // -> Ok({text})")
            }
        }
        Err(error) => format!("    // -> Err({error:?})"),
    }
}

/// Runs `call` and prints its result under the line already printed.
fn report<T: std::fmt::Debug>(result: Result<T, Error>) -> Result<T, Error> {
    say(render(&result));
    if let Err(error) = &result {
        note_error(error);
    }
    result
}

fn location(dev: u8, devices: usize) -> PoolLocation {
    if dev == 255 {
        PoolLocation::Host
    } else {
        PoolLocation::Device(idx(dev, devices))
    }
}

/// Handles held by a value whose `Drop` is slow (it sleeps first): what a program's capture may
/// be, and what keeps the disposal thread busy when the program ends.
pub struct SlowDrop {
    _buffer: Option<DevicePtrHandle>,
    _stream: Option<StreamHandle>,
}

impl Drop for SlowDrop {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Makes a host function's closure for `body`; `buffer` and `bomb` are taken from their slots
/// (by the caller) where the body owns them.
fn host_closure(
    body: HostBody,
    buffer: Option<DevicePtrHandle>,
    stream: Option<StreamHandle>,
    bomb: Option<BombHandle>,
) -> impl FnMut() + Send + 'static {
    let slow = matches!(body, HostBody::CaptureSlow).then(|| SlowDrop {
        _buffer: buffer.clone(),
        _stream: stream.clone(),
    });
    let mut held = buffer;
    move || match body {
        HostBody::CaptureSlow => {
            let _ = &slow;
        }
        HostBody::Nothing => {}
        HostBody::Panic => std::panic::panic_any(UserPanic("a host function panicked")),
        HostBody::Capture => {
            let _ = (&held, &stream);
        }
        HostBody::PanicWithHandle => {
            if let Some(buffer) = held.take() {
                std::panic::panic_any(buffer)
            }
        }
        HostBody::CaptureBomb => {
            let _ = &bomb;
        }
        HostBody::Sleep => std::thread::sleep(Duration::from_millis(20)),
    }
}

impl State {
    /// An empty arena for a program on `devices` devices.
    pub fn new(devices: usize) -> State {
        State {
            devices: devices.max(1),
            ctx: Default::default(),
            greens: Vec::new(),
            streams: Default::default(),
            stream_recyclers: Default::default(),
            events: Default::default(),
            event_recyclers: Default::default(),
            completions: Default::default(),
            many: Vec::new(),
            gates: Default::default(),
            pools: Default::default(),
            bufs: Default::default(),
            graphs: Default::default(),
            nodes: Vec::new(),
            conds: Default::default(),
            execs: Default::default(),
            threads: Default::default(),
            bombs: Default::default(),
            kernels: None,
            set_from: None,
            next_id: 1,
            generations: HashMap::new(),
            tainted: HashSet::new(),
            failed: false,
        }
    }

    fn dev(&self, dev: u8) -> usize {
        idx(dev, self.devices)
    }

    fn ctx(&self, c: u8) -> Option<&ContextHandle> {
        self.ctx[idx(c, SLOTS)].as_ref().map(|c| &c.handle)
    }

    fn stream(&self, s: u8) -> Option<&StreamHandle> {
        self.streams[idx(s, SLOTS)].as_deref()
    }

    fn event(&self, e: u8) -> Option<&Ev> {
        self.events[idx(e, SLOTS)].as_ref()
    }

    fn buf(&self, b: u8) -> Option<&DevicePtrHandle> {
        self.bufs[idx(b, SLOTS)].as_ref()
    }

    fn graph(&self, g: u8) -> Option<&GraphHandle> {
        self.graphs[idx(g, SLOTS)].as_ref()
    }

    fn gate(&self, g: u8) -> &Gate {
        &self.gates[idx(g, GATES)]
    }

    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The dependencies named by `dep`: none for 0, else one of the most recent nodes of any
    /// graph (usually of the same one; another graph's is refused by the library).
    fn deps(&self, dep: u8) -> (Vec<GraphNode>, String) {
        if dep == 0 || self.nodes.is_empty() {
            return (Vec::new(), "&[]".into());
        }
        let back = (dep as usize - 1) % self.nodes.len();
        let index = self.nodes.len() - 1 - back;
        (vec![self.nodes[index]], format!("&[n{index}]"))
    }

    fn node(&self, node: u8) -> Option<(GraphNode, usize)> {
        if self.nodes.is_empty() {
            return None;
        }
        let back = node as usize % self.nodes.len();
        let index = self.nodes.len() - 1 - back;
        Some((self.nodes[index], index))
    }

    fn add_node(&mut self, node: Result<GraphNode, Error>) -> Step {
        let node = report(node)?;
        say(format!("    // n{} = that node", self.nodes.len()));
        self.nodes.push(node);
        Ok(())
    }

    fn kernels(&mut self) -> Result<&Kernels, Error> {
        if self.kernels.is_none() {
            say(
                "let kernels = Kernels::load()?; // fill_u32, add_u32, copy_u32, add_one, spin of tests/kernels",
            );
            let loaded = Kernels::load();
            say(render(&loaded.as_ref().map(|_| ()).map_err(Clone::clone)));
            if let Err(error) = &loaded {
                note_error(error);
            }
            self.kernels = Some(loaded?);
        }
        Ok(self.kernels.as_ref().expect("loaded above"))
    }

    fn set_from(&mut self) -> Result<&SetFrom, Error> {
        if self.set_from.is_none() {
            say(
                "let set_from = conditional_kernels::load()?.kernel(\"set_from\").typed::<(Conditional, Buffer)>(..)?;",
            );
            let library = report(handles_tests::conditional_kernels::load())?;
            let kernel = report(handles_cuda::KernelHandle::get(&library, "set_from"))?;
            // SAFETY: `set_from(handle, selector)` takes a conditional handle and a pointer to
            // one `u32` it reads; the bounds check keeps that word inside the buffer.
            let typed = report(unsafe {
                kernel.typed::<(Conditional, Buffer)>(|args, _| words_fit(args.1, 1))
            })?;
            self.set_from = Some((library, typed));
        }
        Ok(&self.set_from.as_ref().expect("loaded above").1)
    }

    /// Opens every gate (a program never blocks on its own gate longer than it must).
    fn open_gates(&self) {
        for gate in &self.gates {
            gate.open();
        }
    }

    /// `op` with every slot it uses (rather than fills) moved to an occupied slot of its kind
    /// when the one it names is empty: the next occupied one, cyclically. An op whose kind has
    /// no occupied slot at all keeps its number, and is skipped.
    fn resolve(&self, op: &Op) -> Op {
        fn at<T>(slots: &[Option<T>], value: u8) -> u8 {
            let n = slots.len();
            let start = idx(value, n);
            (0..n)
                .map(|step| (start + step) % n)
                .find(|&i| slots[i].is_some())
                .map_or(value, |i| i as u8)
        }
        let ctx = |v| at(&self.ctx, v);
        let stream = |v| at(&self.streams, v);
        let event = |v| at(&self.events, v);
        let event_slot = event;
        let buf = |v| at(&self.bufs, v);
        let pool = |v| at(&self.pools, v);
        let graph = |v| at(&self.graphs, v);
        let exec = |v| at(&self.execs, v);
        let cond = |v| at(&self.conds, v);
        let compl = |v| at(&self.completions, v);
        let bomb = |v| at(&self.bombs, v);
        let mut op = op.clone();
        match &mut op {
            Op::Bind { c }
            | Op::CtxSync { c }
            | Op::MemInfo { c }
            | Op::DropCtx { c }
            | Op::ToCudarc { c } => *c = ctx(*c),
            Op::PollPanickingWaker { k } => *k = compl(*k),
            Op::PanickingBounds { b, s } => {
                *b = buf(*b);
                *s = stream(*s);
            }
            Op::ExecSetKernel { x, b, .. } => {
                *x = exec(*x);
                *b = buf(*b);
            }
            Op::ExecSetCopy { x, b, b2, .. } => {
                *x = exec(*x);
                *b = buf(*b);
                *b2 = buf(*b2);
            }
            Op::Run { c, body, arg } => {
                *c = ctx(*c);
                *arg = match body {
                    RunBody::PanicHoldingBomb => bomb(*arg),
                    RunBody::PanicWithHandle | RunBody::DropBuffer => buf(*arg),
                    RunBody::Nested | RunBody::Bind => ctx(*arg),
                    _ => *arg,
                };
            }
            Op::StreamNew { c, .. }
            | Op::GreenStream { c, .. }
            | Op::LegacyIn { c, .. }
            | Op::StreamRecycler { c, .. }
            | Op::EventNew { c, .. }
            | Op::EventRecycler { c, .. }
            | Op::Alloc { c, .. }
            | Op::AllocHost { c, .. }
            | Op::AllocManaged { c, .. }
            | Op::Occupancy { c, .. }
            | Op::GraphNew { c, .. } => *c = ctx(*c),
            Op::AcquireStream { r, .. } => *r = at(&self.stream_recyclers, *r),
            Op::AcquireEvent { r, .. } => *r = at(&self.event_recyclers, *r),
            Op::StreamSync { s }
            | Op::StreamQuery { s }
            | Op::DropStream { s }
            | Op::Hold { s, .. }
            | Op::AllocAsync { s, .. } => *s = stream(*s),
            Op::WaitEvent { s, e } | Op::Record { e, s } => {
                *s = stream(*s);
                *e = event(*e);
            }
            Op::EventQuery { e }
            | Op::EventSync { e }
            | Op::DropEvent { e }
            | Op::CompletedMany { e, .. }
            | Op::Completed { e, .. } => *e = event(*e),
            Op::Elapsed { e, e2 } => {
                *e = event(*e);
                *e2 = event(*e2);
            }
            Op::IpcEvent { e, c, .. } => {
                *e = event(*e);
                *c = ctx(*c);
            }
            Op::HeldEvent { s, .. } => *s = stream(*s),
            Op::Await { k, .. } | Op::Poll { k } | Op::DropCompletion { k } => *k = compl(*k),
            Op::LaunchHost { s, body, arg } => {
                *s = stream(*s);
                *arg = match body {
                    HostBody::CaptureBomb => bomb(*arg),
                    _ => buf(*arg),
                };
            }
            Op::SetCurrent { p, .. }
            | Op::PeerAccess { p, .. }
            | Op::RevokePeers { p }
            | Op::PoolTune { p, .. }
            | Op::DropPool { p } => *p = pool(*p),
            Op::AllocPool { p, s, .. } => {
                *p = pool(*p);
                *s = stream(*s);
            }
            Op::View { src, .. } => *src = buf(*src),
            Op::Memset { b, s, .. }
            | Op::FromHost { b, s, .. }
            | Op::ToHost { b, s }
            | Op::SetDealloc { b, s }
            | Op::RecordUse { b, s }
            | Op::HostView { b, s, .. }
            | Op::Prefetch { b, s, .. }
            | Op::AttachMem { b, s, .. }
            | Op::Typed { b, s } => {
                *b = buf(*b);
                *s = stream(*s);
            }
            Op::CopyAsync { src, dst, s, .. } => {
                *src = buf(*src);
                *dst = buf(*dst);
                *s = stream(*s);
            }
            Op::Batch { s, a, b, c, .. } => {
                *s = stream(*s);
                *a = buf(*a);
                *b = buf(*b);
                *c = buf(*c);
            }
            Op::Advise { b, .. } | Op::DropBuf { b } | Op::TensorMap { b, .. } => *b = buf(*b),
            Op::IpcRoundTrip { src, s, .. } => {
                *src = buf(*src);
                *s = stream(*s);
            }
            Op::Launch { b, b2, s, .. } => {
                *b = buf(*b);
                *b2 = buf(*b2);
                *s = stream(*s);
            }
            Op::BlockSize { c, action, arg } => {
                *c = ctx(*c);
                if *action == PerBlock::Rebind {
                    *arg = ctx(*arg);
                }
            }
            Op::Capture { c, b, s, .. } => {
                *c = ctx(*c);
                *b = buf(*b);
                *s = stream(*s);
            }
            Op::NodeKernel { g, b, .. }
            | Op::NodeMemset { g, b, .. }
            | Op::NodeMemFree { g, b, .. } => {
                *g = graph(*g);
                *b = buf(*b);
            }
            Op::NodeCopy { g, b, b2, .. } => {
                *g = graph(*g);
                *b = buf(*b);
                *b2 = buf(*b2);
            }
            Op::NodeEventRecord { g, e, .. } | Op::NodeEventWait { g, e, .. } => {
                *g = graph(*g);
                *e = event(*e);
            }
            Op::NodeEmpty { g, .. }
            | Op::NodeMemAlloc { g, .. }
            | Op::CondCreate { g, .. }
            | Op::Instantiate { g, .. }
            | Op::DropGraph { g } => *g = graph(*g),
            Op::NodeHost { g, body, arg, .. } => {
                *g = graph(*g);
                *arg = match body {
                    HostBody::CaptureBomb => bomb(*arg),
                    _ => buf(*arg),
                };
            }
            Op::NodeChild { g, child, .. } => {
                *g = graph(*g);
                *child = graph(*child);
            }
            Op::CondNode { g, h, .. } => {
                *g = graph(*g);
                *h = cond(*h);
            }
            Op::NodeSetCond { g, h, b, .. } => {
                *g = graph(*g);
                *h = cond(*h);
                *b = buf(*b);
            }
            Op::ExecLaunch { x, s } => {
                *x = exec(*x);
                *s = stream(*s);
            }
            Op::ExecUpdate { x, g } => {
                *x = exec(*x);
                *g = graph(*g);
            }
            Op::ExecSetMemset { x, b, .. } => {
                *x = exec(*x);
                *b = buf(*b);
            }
            Op::ExecEnable { x, .. } | Op::DropExec { x } => *x = exec(*x),
            Op::Thread { job, a, b, .. } => match job {
                ThreadJob::DropBuffer => *a = buf(*a),
                ThreadJob::DropStream => *a = stream(*a),
                ThreadJob::Work => {
                    *a = stream(*a);
                    *b = buf(*b);
                }
                ThreadJob::Await => *a = event(*a),
                ThreadJob::BindAndExit | ThreadJob::Churn | ThreadJob::RunPanic => *a = ctx(*a),
            },
            Op::Bomb { owns, chain, .. } => {
                if *owns != 255 {
                    *owns = buf(*owns);
                }
                if *chain != 255 {
                    *chain = bomb(*chain);
                }
            }
            Op::LaunchEx { b, s, event, .. } => {
                *b = buf(*b);
                *s = stream(*s);
                if *event != 255 {
                    *event = event_slot(*event);
                }
            }
            Op::DropBomb { k } => *k = bomb(*k),
            _ => {}
        }
        op
    }

    /// Runs one op under `catch_unwind`: a panic with one of the program's own payloads where
    /// the API propagates it is expected; any other panic escaped from the library.
    pub fn step(&mut self, index: usize, op: &Op) {
        say(format!("// op {index}: {}", op.encode()));
        let op = &self.resolve(op);
        let outcome = catch_unwind(AssertUnwindSafe(|| self.exec(op)));
        match outcome {
            Ok(_) => {}
            Err(payload) if is_user_panic(&*payload) => {
                say(format!(
                    "    // -> panicked on purpose, propagated as documented: {}",
                    describe_panic(&*payload)
                ));
                // The payload may be a handle: dropped here, on the program's thread.
                if let Err(second) = catch_unwind(AssertUnwindSafe(|| drop(payload)))
                    && !is_user_panic(&*second)
                {
                    fail(format!(
                        "panic escaped while dropping a panic payload: {}",
                        describe_panic(&*second)
                    ));
                    self.failed = true;
                }
            }
            Err(payload) => {
                fail(format!(
                    "panic escaped from the library in op {index} ({}): {}",
                    op.encode(),
                    describe_panic(&*payload)
                ));
                self.failed = true;
            }
        }
    }

    #[allow(clippy::too_many_lines)]
    fn exec(&mut self, op: &Op) -> Step {
        match *op {
            // Contexts.
            Op::Primary { c, dev } => {
                let dev = self.dev(dev);
                self.drop_ctx(c);
                say(format!(
                    "let c{} = ContextHandle::primary({dev})?;",
                    idx(c, SLOTS)
                ));
                let handle = report(ContextHandle::primary(dev))?;
                self.ctx[idx(c, SLOTS)] = Some(Ctx {
                    handle,
                    green: None,
                });
            }
            Op::Green { c, dev, sms } => {
                let dev = self.dev(dev);
                self.drop_ctx(c);
                say(format!(
                    "let green{0} = GreenContextHandle::create({dev}, {sms})?; let c{0} = green{0}.context()?;",
                    idx(c, SLOTS)
                ));
                let green = report(GreenContextHandle::create(dev, sms))?;
                self.greens.push(green.downgrade());
                let handle = report(green.context())?;
                self.ctx[idx(c, SLOTS)] = Some(Ctx {
                    handle,
                    green: Some(green),
                });
            }
            Op::Bind { c } => {
                let Some(context) = self.ctx(c) else {
                    return skip("no context");
                };
                say(format!("c{}.bind_to_thread()?;", idx(c, SLOTS)));
                report(context.bind_to_thread())?;
            }
            Op::Unbind {} => {
                say("ContextHandle::unbind_thread()?;");
                report(ContextHandle::unbind_thread())?;
            }
            Op::Current { c } => {
                self.drop_ctx(c);
                say(format!(
                    "let c{} = ContextHandle::current()?; // kept if Some",
                    idx(c, SLOTS)
                ));
                if let Some(handle) = report(ContextHandle::current())? {
                    self.ctx[idx(c, SLOTS)] = Some(Ctx {
                        handle,
                        green: None,
                    });
                }
            }
            Op::CtxSync { c } => {
                self.open_gates();
                let Some(context) = self.ctx(c) else {
                    return skip("no context");
                };
                say(format!("c{}.synchronize()?;", idx(c, SLOTS)));
                report(context.synchronize())?;
            }
            Op::MemInfo { c } => {
                let Some(context) = self.ctx(c) else {
                    return skip("no context");
                };
                say(format!("c{}.mem_get_info()?;", idx(c, SLOTS)));
                report(context.mem_get_info())?;
            }
            Op::Run { c, body, arg } => return self.run_op(c, body, arg),
            Op::ClearPrimaryCache {} => {
                say("handles_cuda::exec::clear_primary_cache();");
                handles_cuda::exec::clear_primary_cache();
            }
            Op::WithPrimary { dev, body } => {
                let dev = self.dev(dev);
                let other = (dev + 1) % self.devices;
                say(format!(
                    "ContextHandle::with_primary({dev}, |c| {})?;",
                    match body {
                        PrimaryBody::Sync => "c.synchronize()".to_string(),
                        PrimaryBody::ClearCache => "clear_primary_cache()".into(),
                        PrimaryBody::Stream =>
                            "drop(StreamHandle::create(c, StreamFlags::default(), 0))".into(),
                        PrimaryBody::Panic => "panic_any(UserPanic)".into(),
                        PrimaryBody::Nested =>
                            format!("ContextHandle::with_primary({other}, |d| d.synchronize())"),
                        PrimaryBody::Bind => "c.bind_to_thread()".into(),
                        PrimaryBody::Run => "c.run(|| Ok(()))".into(),
                    }
                ));
                let result = ContextHandle::with_primary(dev, |context| -> Result<(), Error> {
                    match body {
                        PrimaryBody::Sync => context.synchronize(),
                        PrimaryBody::ClearCache => {
                            handles_cuda::exec::clear_primary_cache();
                            Ok(())
                        }
                        PrimaryBody::Stream => {
                            StreamHandle::create(context, StreamFlags::default(), 0).map(drop)
                        }
                        PrimaryBody::Panic => {
                            std::panic::panic_any(UserPanic("with_primary's closure panicked"))
                        }
                        PrimaryBody::Nested => {
                            ContextHandle::with_primary(other, ContextHandle::synchronize)?
                        }
                        PrimaryBody::Bind => context.bind_to_thread(),
                        PrimaryBody::Run => context.run(|| Ok::<_, Error>(())),
                    }
                });
                report(result.and_then(|inner| inner))?;
            }
            Op::FlushDisposals {} => {
                self.open_gates();
                say("handles_cuda::exec::flush_disposals(Duration::from_secs(5));");
                let flushed = handles_cuda::exec::flush_disposals(Duration::from_secs(5));
                say(format!("    // -> {flushed}"));
            }
            Op::CudarcRelease { dev } => {
                let dev = self.dev(dev);
                say(format!(
                    "drop(CudaContext::new({dev})?); // cudarc releases its retain, leaving the context current"
                ));
                match CudaContext::new(dev) {
                    Ok(context) => drop(context),
                    Err(error) => say(format!("    // -> cudarc: Err({error:?})")),
                }
            }
            Op::FromCudarc { c, dev } => {
                let dev = self.dev(dev);
                self.drop_ctx(c);
                say(format!(
                    "let c{} = ContextHandle::from_cudarc(&CudaContext::new({dev})?); // the Arc dropped after",
                    idx(c, SLOTS)
                ));
                match CudaContext::new(dev) {
                    Ok(context) => {
                        let handle = ContextHandle::from_cudarc(&context);
                        drop(context);
                        self.ctx[idx(c, SLOTS)] = Some(Ctx {
                            handle,
                            green: None,
                        });
                    }
                    Err(error) => say(format!("    // -> cudarc: Err({error:?})")),
                }
            }
            Op::ToCudarc { c } => {
                let Some(context) = self.ctx(c) else {
                    return skip("no context");
                };
                say(format!(
                    "drop(c{}.to_cudarc()?); // cudarc's Drop binds its context and releases its retain",
                    idx(c, SLOTS)
                ));
                drop(report(context.to_cudarc())?);
            }
            Op::DropCtx { c } => {
                say(format!("drop(c{});", idx(c, SLOTS)));
                self.drop_ctx(c);
            }
            // Streams.
            Op::StreamNew {
                s,
                c,
                nonblocking,
                prio,
            } => {
                let Some(context) = self.ctx(c).cloned() else {
                    return skip("no context");
                };
                let priority = -i32::from(prio % 3);
                self.drop_stream(s);
                say(format!(
                    "let s{} = StreamHandle::create(&c{}, StreamFlags {{ non_blocking: {nonblocking} }}, {priority})?;",
                    idx(s, SLOTS),
                    idx(c, SLOTS)
                ));
                let stream = report(StreamHandle::create(
                    &context,
                    StreamFlags {
                        non_blocking: nonblocking,
                    },
                    priority,
                ))?;
                self.streams[idx(s, SLOTS)] = Some(Strm::Owned(stream));
            }
            Op::GreenStream { s, c } => {
                let Some(green) = self.ctx[idx(c, SLOTS)]
                    .as_ref()
                    .and_then(|c| c.green.clone())
                else {
                    return skip("no green context");
                };
                self.drop_stream(s);
                say(format!(
                    "let s{} = green{}.create_stream(0)?;",
                    idx(s, SLOTS),
                    idx(c, SLOTS)
                ));
                let stream = report(green.create_stream(0))?;
                self.streams[idx(s, SLOTS)] = Some(Strm::Owned(stream));
            }
            Op::Legacy { s } => {
                self.drop_stream(s);
                say(format!("let s{} = StreamHandle::legacy();", idx(s, SLOTS)));
                self.streams[idx(s, SLOTS)] = Some(Strm::Owned(StreamHandle::legacy()));
            }
            Op::PerThread { s } => {
                self.drop_stream(s);
                say(format!(
                    "let s{} = StreamHandle::per_thread();",
                    idx(s, SLOTS)
                ));
                self.streams[idx(s, SLOTS)] = Some(Strm::Owned(StreamHandle::per_thread()));
            }
            Op::LegacyIn { s, c } => {
                let Some(context) = self.ctx(c).cloned() else {
                    return skip("no context");
                };
                self.drop_stream(s);
                say(format!(
                    "let s{} = StreamHandle::legacy_in(&c{})?;",
                    idx(s, SLOTS),
                    idx(c, SLOTS)
                ));
                let stream = report(StreamHandle::legacy_in(&context))?;
                self.streams[idx(s, SLOTS)] = Some(Strm::Owned(stream));
            }
            Op::StreamRecycler { r, c } => {
                let Some(context) = self.ctx(c).cloned() else {
                    return skip("no context");
                };
                say(format!(
                    "let sr{} = StreamRecycler::new(&c{}, StreamFlags {{ non_blocking: true }}, 0)?;",
                    idx(r, SLOTS),
                    idx(c, SLOTS)
                ));
                self.stream_recyclers[idx(r, SLOTS)] = None;
                let recycler = report(StreamRecycler::new(
                    &context,
                    StreamFlags { non_blocking: true },
                    0,
                ))?;
                self.stream_recyclers[idx(r, SLOTS)] = Some(recycler);
            }
            Op::AcquireStream { s, r } => {
                let Some(recycler) = self.stream_recyclers[idx(r, SLOTS)].clone() else {
                    return skip("no stream recycler");
                };
                self.drop_stream(s);
                say(format!(
                    "let s{} = sr{}.acquire()?;",
                    idx(s, SLOTS),
                    idx(r, SLOTS)
                ));
                let stream = report(recycler.acquire())?;
                self.streams[idx(s, SLOTS)] = Some(Strm::Recycled(stream));
            }
            Op::StreamSync { s } => {
                self.open_gates();
                let Some(stream) = self.stream(s) else {
                    return skip("no stream");
                };
                say(format!("s{}.synchronize()?;", idx(s, SLOTS)));
                report(stream.synchronize())?;
            }
            Op::StreamQuery { s } => {
                let Some(stream) = self.stream(s) else {
                    return skip("no stream");
                };
                say(format!("s{}.query()?;", idx(s, SLOTS)));
                report(stream.query())?;
            }
            Op::WaitEvent { s, e } => {
                let (Some(stream), Some(event)) = (self.stream(s), self.event(e)) else {
                    return skip("no stream or event");
                };
                say(format!(
                    "s{}.wait_event(&e{})?;",
                    idx(s, SLOTS),
                    idx(e, SLOTS)
                ));
                report(stream.wait_event(event))?;
            }
            Op::DropStream { s } => {
                say(format!("drop(s{});", idx(s, SLOTS)));
                self.drop_stream(s);
            }
            // Events.
            Op::EventNew {
                e,
                c,
                timing,
                blocking,
            } => {
                let Some(context) = self.ctx(c).cloned() else {
                    return skip("no context");
                };
                self.drop_event(e);
                say(format!(
                    "let e{} = EventHandle::create(&c{}, EventFlags {{ timing: {timing}, blocking_sync: {blocking}, interprocess: {} }})?;",
                    idx(e, SLOTS),
                    idx(c, SLOTS),
                    !timing
                ));
                let flags = EventFlags {
                    timing,
                    blocking_sync: blocking,
                    interprocess: !timing,
                };
                let event = report(EventHandle::create(&context, flags))?;
                let id = self.fresh_id();
                self.events[idx(e, SLOTS)] = Some(Ev {
                    event: EvKind::Owned(event),
                    id,
                });
            }
            Op::EventInCurrent { e } => {
                self.drop_event(e);
                say(format!(
                    "let e{} = EventHandle::create_in_current(EventFlags::default())?;",
                    idx(e, SLOTS)
                ));
                let event = report(EventHandle::create_in_current(EventFlags::default()))?;
                let id = self.fresh_id();
                self.events[idx(e, SLOTS)] = Some(Ev {
                    event: EvKind::Owned(event),
                    id,
                });
            }
            Op::EventRecycler { r, c } => {
                let Some(context) = self.ctx(c).cloned() else {
                    return skip("no context");
                };
                say(format!(
                    "let er{} = EventRecycler::new(&c{}, EventFlags::default())?;",
                    idx(r, SLOTS),
                    idx(c, SLOTS)
                ));
                self.event_recyclers[idx(r, SLOTS)] = None;
                let recycler = report(EventRecycler::new(&context, EventFlags::default()))?;
                self.event_recyclers[idx(r, SLOTS)] = Some(recycler);
            }
            Op::AcquireEvent { e, r } => {
                let Some(recycler) = self.event_recyclers[idx(r, SLOTS)].clone() else {
                    return skip("no event recycler");
                };
                self.drop_event(e);
                say(format!(
                    "let e{} = er{}.acquire()?;",
                    idx(e, SLOTS),
                    idx(r, SLOTS)
                ));
                let event = report(recycler.acquire())?;
                let id = self.fresh_id();
                self.events[idx(e, SLOTS)] = Some(Ev {
                    event: EvKind::Recycled(event),
                    id,
                });
            }
            Op::Record { e, s } => {
                let (Some(event), Some(stream)) = (self.event(e), self.stream(s)) else {
                    return skip("no event or stream");
                };
                let id = event.id;
                say(format!("e{}.record(&s{})?;", idx(e, SLOTS), idx(s, SLOTS)));
                let recorded = match &event.event {
                    EvKind::Owned(event) => event.record(stream),
                    EvKind::Recycled(event) => event.record(stream),
                };
                *self.generations.entry(id).or_default() += 1;
                report(recorded)?;
            }
            Op::EventQuery { e } => {
                let Some(event) = self.event(e) else {
                    return skip("no event");
                };
                say(format!("e{}.query()?;", idx(e, SLOTS)));
                report(event.query())?;
            }
            Op::EventSync { e } => {
                self.open_gates();
                let Some(event) = self.event(e) else {
                    return skip("no event");
                };
                say(format!("e{}.synchronize()?;", idx(e, SLOTS)));
                report(event.synchronize())?;
            }
            Op::Elapsed { e, e2 } => {
                let (Some(start), Some(end)) = (self.event(e), self.event(e2)) else {
                    return skip("no events");
                };
                say(format!(
                    "e{}.elapsed_ms(&e{})?;",
                    idx(e, SLOTS),
                    idx(e2, SLOTS)
                ));
                report(start.elapsed_ms(end))?;
            }
            Op::IpcEvent { e, e2, c } => {
                let (Some(event), Some(context)) = (self.event(e), self.ctx(c).cloned()) else {
                    return skip("no event or context");
                };
                let id = event.id;
                say(format!(
                    "let e{} = EventHandle::import_ipc(&c{}, &e{}.export_ipc()?)?;",
                    idx(e2, SLOTS),
                    idx(c, SLOTS),
                    idx(e, SLOTS)
                ));
                let token = report(event.export_ipc())?;
                let imported = report(EventHandle::import_ipc(&context, &token))?;
                self.tainted.insert(id);
                self.drop_event(e2);
                let new_id = self.fresh_id();
                self.tainted.insert(new_id);
                self.events[idx(e2, SLOTS)] = Some(Ev {
                    event: EvKind::Owned(imported),
                    id: new_id,
                });
            }
            Op::HeldEvent { e, s, g } => {
                let Some(stream) = self.stream(s).cloned() else {
                    return skip("no stream");
                };
                let gate = self.gate(g).clone();
                say(format!(
                    "s{}.launch_host(move || gate{}.wait())?; // held until the gate opens",
                    idx(s, SLOTS),
                    idx(g, GATES)
                ));
                report(stream.launch_host(move || gate.wait()))?;
                if self.event(e).is_none() {
                    let context = stream.context().clone();
                    let Some(context) = context.or_else(|| self.ctx(0).cloned()) else {
                        return skip("no context for the event");
                    };
                    say(format!(
                        "let e{} = EventHandle::create(&s{}'s context, EventFlags::default())?;",
                        idx(e, SLOTS),
                        idx(s, SLOTS)
                    ));
                    let event = report(EventHandle::create(&context, EventFlags::default()))?;
                    let id = self.fresh_id();
                    self.events[idx(e, SLOTS)] = Some(Ev {
                        event: EvKind::Owned(event),
                        id,
                    });
                }
                return self.exec(&Op::Record { e, s });
            }
            Op::DropEvent { e } => {
                say(format!("drop(e{});", idx(e, SLOTS)));
                self.drop_event(e);
            }
            Op::Completed { k, e } => {
                let Some(event) = self.event(e) else {
                    return skip("no event");
                };
                let (handle, id) = ((**event).clone(), event.id);
                let generation = self.generations.get(&id).copied().unwrap_or(0);
                self.completions[idx(k, SLOTS)] = None;
                say(format!(
                    "let f{} = e{}.completed()?;",
                    idx(k, SLOTS),
                    idx(e, SLOTS)
                ));
                let future = report(handle.completed())?;
                self.completions[idx(k, SLOTS)] = Some(Compl {
                    future,
                    event: handle,
                    id,
                    generation,
                });
            }
            Op::CompletedMany { e, n } => {
                let Some(event) = self.event(e) else {
                    return skip("no event");
                };
                let event = (**event).clone();
                say(format!(
                    "let many: Vec<Completion> = (0..{n}).map(|_| e{}.completed()).collect::<Result<_>>()?;",
                    idx(e, SLOTS)
                ));
                for _ in 0..n {
                    let future = event.completed();
                    if future.is_err() {
                        drop(report(future)?);
                        break;
                    }
                    self.many.extend(future);
                }
            }
            Op::Await { k, open } => {
                if open > 0 {
                    say(format!("gate{}.open();", idx(open - 1, GATES)));
                    self.gate(open - 1).open();
                }
                let Some(slot) = self.completions[idx(k, SLOTS)].as_mut() else {
                    return skip("no completion");
                };
                let check = !self.tainted.contains(&slot.id)
                    && self.generations.get(&slot.id).copied().unwrap_or(0) == slot.generation;
                say(format!(
                    "block_on(f{}); // bounded: gives up while its event is held back",
                    idx(k, SLOTS)
                ));
                match await_bounded(&mut slot.future, &slot.event, check) {
                    Awaited::Ready => {
                        say("    // -> ready");
                        self.completions[idx(k, SLOTS)] = None;
                    }
                    Awaited::GaveUp => say("    // -> still pending: its event is held back"),
                    Awaited::Stuck => {
                        fail(format!(
                            "liveness: a completion stayed pending {} ms after its event completed",
                            LIVENESS.as_millis()
                        ));
                        self.failed = true;
                    }
                }
            }
            Op::Poll { k } => {
                let Some(slot) = self.completions[idx(k, SLOTS)].as_mut() else {
                    return skip("no completion");
                };
                say(format!("poll(f{}) once;", idx(k, SLOTS)));
                let waker = park_waker();
                let ready = Pin::new(&mut slot.future)
                    .poll(&mut TaskContext::from_waker(&waker))
                    .is_ready();
                say(format!("    // -> ready: {ready}"));
            }
            Op::PollPanickingWaker { k } => {
                let Some(slot) = self.completions[idx(k, SLOTS)].as_mut() else {
                    return skip("no completion");
                };
                say(format!(
                    "poll(f{}) once, with a waker whose wake() panics;",
                    idx(k, SLOTS)
                ));
                let waker = Waker::from(Arc::new(PanickingWaker));
                let ready = Pin::new(&mut slot.future)
                    .poll(&mut TaskContext::from_waker(&waker))
                    .is_ready();
                say(format!("    // -> ready: {ready}"));
            }
            Op::DropCompletion { k } => {
                say(format!("drop(f{});", idx(k, SLOTS)));
                self.completions[idx(k, SLOTS)] = None;
            }
            // Gates and host functions.
            Op::Hold { s, g } => {
                let Some(stream) = self.stream(s) else {
                    return skip("no stream");
                };
                let gate = self.gate(g).clone();
                say(format!(
                    "s{}.launch_host(move || gate{}.wait())?;",
                    idx(s, SLOTS),
                    idx(g, GATES)
                ));
                report(stream.launch_host(move || gate.wait()))?;
            }
            Op::Open { g } => {
                say(format!("gate{}.open();", idx(g, GATES)));
                self.gate(g).open();
            }
            Op::LaunchHost { s, body, arg } => {
                let Some(stream) = self.stream(s).cloned() else {
                    return skip("no stream");
                };
                let (buffer, bomb) = match body {
                    HostBody::PanicWithHandle => (self.bufs[idx(arg, SLOTS)].take(), None),
                    HostBody::Capture | HostBody::CaptureSlow => (self.buf(arg).cloned(), None),
                    HostBody::CaptureBomb => (None, self.bombs[idx(arg, SLOTS)].take()),
                    _ => (None, None),
                };
                say(format!(
                    "s{}.launch_host({})?;",
                    idx(s, SLOTS),
                    host_text(body, arg, idx(s, SLOTS))
                ));
                let captured = matches!(body, HostBody::Capture | HostBody::CaptureSlow)
                    .then(|| stream.clone());
                let closure = host_closure(body, buffer, captured, bomb);
                report(stream.launch_host(closure))?;
            }
            // Pools.
            Op::PoolNew { p, kind, dev, ipc } => {
                let dev = self.dev(dev);
                let location = match kind {
                    PoolKind::Device => PoolLocation::Device(dev),
                    PoolKind::Host => PoolLocation::Host,
                    PoolKind::HostNuma => PoolLocation::HostNuma(0),
                };
                self.pools[idx(p, SLOTS)] = None;
                say(format!(
                    "let p{} = MemoryPoolHandle::create(&PoolProps {{ location: PoolLocation::{location:?}, ipc: {ipc}, max_size: 0, device: {dev} }})?;",
                    idx(p, SLOTS)
                ));
                let pool = report(MemoryPoolHandle::create(&PoolProps {
                    location,
                    ipc,
                    max_size: 0,
                    device: dev,
                }))?;
                self.pools[idx(p, SLOTS)] = Some(pool);
            }
            Op::PoolDefault { p, dev } => {
                let dev = self.dev(dev);
                self.pools[idx(p, SLOTS)] = None;
                say(format!(
                    "let p{} = MemoryPoolHandle::device_default({dev})?;",
                    idx(p, SLOTS)
                ));
                self.pools[idx(p, SLOTS)] = Some(report(MemoryPoolHandle::device_default(dev))?);
            }
            Op::PoolCurrent { p, dev } => {
                let dev = self.dev(dev);
                self.pools[idx(p, SLOTS)] = None;
                say(format!(
                    "let p{} = MemoryPoolHandle::device_current({dev})?;",
                    idx(p, SLOTS)
                ));
                self.pools[idx(p, SLOTS)] = Some(report(MemoryPoolHandle::device_current(dev))?);
            }
            Op::SetCurrent { p, dev } => {
                let dev = self.dev(dev);
                let Some(pool) = &self.pools[idx(p, SLOTS)] else {
                    return skip("no pool");
                };
                say(format!("p{}.set_device_current({dev})?;", idx(p, SLOTS)));
                report(pool.set_device_current(dev))?;
            }
            Op::PeerAccess { p, dev, on } => {
                let dev = self.dev(dev);
                let Some(pool) = &self.pools[idx(p, SLOTS)] else {
                    return skip("no pool");
                };
                say(format!("p{}.set_peer_access({dev}, {on})?;", idx(p, SLOTS)));
                report(pool.set_peer_access(dev, on))?;
            }
            Op::RevokePeers { p } => {
                let Some(pool) = &self.pools[idx(p, SLOTS)] else {
                    return skip("no pool");
                };
                say(format!("p{}.revoke_peer_access()?;", idx(p, SLOTS)));
                report(pool.revoke_peer_access())?;
            }
            Op::PoolTune { p, threshold } => {
                let Some(pool) = &self.pools[idx(p, SLOTS)] else {
                    return skip("no pool");
                };
                say(format!(
                    "p{0}.set_release_threshold({threshold})?; p{0}.usage()?; p{0}.trim_to(0)?;",
                    idx(p, SLOTS)
                ));
                report(pool.set_release_threshold(threshold))?;
                report(pool.usage())?;
                report(pool.reuse_policy())?;
                report(pool.trim_to(0))?;
            }
            Op::DropPool { p } => {
                say(format!("drop(p{});", idx(p, SLOTS)));
                self.pools[idx(p, SLOTS)] = None;
            }
            // Memory.
            Op::AllocPool { b, p, s, size } => {
                let (Some(pool), Some(stream)) =
                    (self.pools[idx(p, SLOTS)].clone(), self.stream(s).cloned())
                else {
                    return skip("no pool or stream");
                };
                self.drop_buf(b);
                say(format!(
                    "let b{} = DevicePtrHandle::alloc_from_pool(&p{}, {size}, &s{})?;",
                    idx(b, SLOTS),
                    idx(p, SLOTS),
                    idx(s, SLOTS)
                ));
                let buffer = report(DevicePtrHandle::alloc_from_pool(
                    &pool,
                    size as usize,
                    &stream,
                ))?;
                self.bufs[idx(b, SLOTS)] = Some(buffer);
            }
            Op::AllocAsync { b, s, size } => {
                let Some(stream) = self.stream(s).cloned() else {
                    return skip("no stream");
                };
                self.drop_buf(b);
                say(format!(
                    "let b{} = DevicePtrHandle::alloc_async({size}, &s{})?;",
                    idx(b, SLOTS),
                    idx(s, SLOTS)
                ));
                let buffer = report(DevicePtrHandle::alloc_async(size as usize, &stream))?;
                self.bufs[idx(b, SLOTS)] = Some(buffer);
            }
            Op::Alloc { b, c, size } => {
                let Some(context) = self.ctx(c).cloned() else {
                    return skip("no context");
                };
                self.drop_buf(b);
                say(format!(
                    "let b{} = DevicePtrHandle::alloc(&c{}, {size})?;",
                    idx(b, SLOTS),
                    idx(c, SLOTS)
                ));
                self.bufs[idx(b, SLOTS)] =
                    Some(report(DevicePtrHandle::alloc(&context, size as usize))?);
            }
            Op::AllocHost { b, c, size } => {
                let Some(context) = self.ctx(c).cloned() else {
                    return skip("no context");
                };
                self.drop_buf(b);
                say(format!(
                    "let b{} = DevicePtrHandle::alloc_host(&c{}, {size})?;",
                    idx(b, SLOTS),
                    idx(c, SLOTS)
                ));
                self.bufs[idx(b, SLOTS)] = Some(report(DevicePtrHandle::alloc_host(
                    &context,
                    size as usize,
                ))?);
            }
            Op::AllocManaged { b, c, size, attach } => {
                let Some(context) = self.ctx(c).cloned() else {
                    return skip("no context");
                };
                self.drop_buf(b);
                say(format!(
                    "let b{} = DevicePtrHandle::alloc_managed(&c{}, {size}, Attach::{attach:?})?;",
                    idx(b, SLOTS),
                    idx(c, SLOTS)
                ));
                let buffer = report(DevicePtrHandle::alloc_managed(
                    &context,
                    size as usize,
                    attach_of(attach),
                ))?;
                self.bufs[idx(b, SLOTS)] = Some(buffer);
            }
            Op::View { b, src, off, len } => {
                let Some(source) = self.buf(src).cloned() else {
                    return skip("no buffer");
                };
                say(format!(
                    "let b{} = b{}.view({off}, {len})?;",
                    idx(b, SLOTS),
                    idx(src, SLOTS)
                ));
                let view = report(source.view(off as usize, len as usize))?;
                self.drop_buf(b);
                self.bufs[idx(b, SLOTS)] = Some(view);
            }
            Op::Memset {
                b,
                s,
                off,
                len,
                val,
            } => {
                let (Some(buffer), Some(stream)) = (self.buf(b), self.stream(s)) else {
                    return skip("no buffer or stream");
                };
                say(format!(
                    "b{}.memset_at_async({off}, {val}, {len}, &s{})?;",
                    idx(b, SLOTS),
                    idx(s, SLOTS)
                ));
                report(buffer.memset_at_async(off as usize, val, len as usize, stream))?;
            }
            Op::CopyAsync { src, dst, s, len } => {
                let (Some(from), Some(to), Some(stream)) =
                    (self.buf(src), self.buf(dst), self.stream(s))
                else {
                    return skip("no buffers or stream");
                };
                say(format!(
                    "b{}.copy_to_async(0, &b{}, 0, {len}, &s{})?;",
                    idx(src, SLOTS),
                    idx(dst, SLOTS),
                    idx(s, SLOTS)
                ));
                report(from.copy_to_async(0, to, 0, len as usize, stream))?;
            }
            Op::FromHost { b, s, len } => {
                self.open_gates();
                let (Some(buffer), Some(stream)) = (self.buf(b), self.stream(s)) else {
                    return skip("no buffer or stream");
                };
                let bytes = vec![5u8; (len as usize).min(1 << 20)];
                say(format!(
                    "b{}.copy_from_host(&[5u8; {}], &s{})?;",
                    idx(b, SLOTS),
                    bytes.len(),
                    idx(s, SLOTS)
                ));
                report(buffer.copy_from_host(&bytes, stream))?;
            }
            Op::ToHost { b, s } => {
                self.open_gates();
                let (Some(buffer), Some(stream)) = (self.buf(b), self.stream(s)) else {
                    return skip("no buffer or stream");
                };
                let mut bytes = vec![0u8; buffer.size().min(1 << 20)];
                say(format!(
                    "b{}.copy_to_host(&mut [0u8; {}], &s{})?;",
                    idx(b, SLOTS),
                    bytes.len(),
                    idx(s, SLOTS)
                ));
                report(buffer.copy_to_host(&mut bytes, stream))?;
            }
            Op::Batch { s, a, b, c, len } => {
                let (Some(stream), Some(x), Some(y), Some(z)) =
                    (self.stream(s), self.buf(a), self.buf(b), self.buf(c))
                else {
                    return skip("no stream or buffers");
                };
                let len = len as usize;
                say(format!(
                    "s{0}.copy_batch(&[BatchCopy::bytes(&b{1}, 0, &b{2}, 0, {len}), BatchCopy::bytes(&b{3}, {len}, &b{2}, {len}, {len})])?;",
                    idx(s, SLOTS),
                    idx(a, SLOTS),
                    idx(b, SLOTS),
                    idx(c, SLOTS)
                ));
                report(stream.copy_batch(&[
                    BatchCopy::bytes(x, 0, y, 0, len),
                    BatchCopy::bytes(z, len, y, len, len),
                ]))?;
            }
            Op::SetDealloc { b, s } => {
                let (Some(buffer), Some(stream)) = (self.buf(b), self.stream(s)) else {
                    return skip("no buffer or stream");
                };
                say(format!(
                    "b{}.set_deallocation_stream(&s{})?;",
                    idx(b, SLOTS),
                    idx(s, SLOTS)
                ));
                report(buffer.set_deallocation_stream(stream))?;
            }
            Op::RecordUse { b, s } => {
                let (Some(buffer), Some(stream)) = (self.buf(b), self.stream(s)) else {
                    return skip("no buffer or stream");
                };
                say(format!(
                    "b{}.record_use(&s{})?;",
                    idx(b, SLOTS),
                    idx(s, SLOTS)
                ));
                report(buffer.record_use(stream))?;
            }
            Op::HostView { b, s, inner } => {
                self.open_gates();
                return self.host_view(b, s, inner);
            }
            Op::Prefetch { b, s, dev } => {
                let (Some(buffer), Some(stream)) = (self.buf(b), self.stream(s)) else {
                    return skip("no buffer or stream");
                };
                let at = location(dev, self.devices);
                say(format!(
                    "b{}.prefetch(PoolLocation::{at:?}, &s{})?;",
                    idx(b, SLOTS),
                    idx(s, SLOTS)
                ));
                report(buffer.prefetch(at, stream))?;
            }
            Op::Advise { b, dev } => {
                let Some(buffer) = self.buf(b) else {
                    return skip("no buffer");
                };
                let at = location(if dev % 2 == 0 { 255 } else { 0 }, self.devices);
                let advice = match dev % 6 {
                    0 => Advice::SetReadMostly,
                    1 => Advice::UnsetReadMostly,
                    2 => Advice::SetPreferredLocation(at),
                    3 => Advice::UnsetPreferredLocation,
                    4 => Advice::SetAccessedBy(at),
                    _ => Advice::UnsetAccessedBy(at),
                };
                say(format!("b{}.advise(Advice::{advice:?})?;", idx(b, SLOTS)));
                report(buffer.advise(advice))?;
            }
            Op::AttachMem { b, s, how } => {
                let (Some(buffer), Some(stream)) = (self.buf(b), self.stream(s)) else {
                    return skip("no buffer or stream");
                };
                say(format!(
                    "b{}.attach(&s{}, Attach::{how:?})?;",
                    idx(b, SLOTS),
                    idx(s, SLOTS)
                ));
                report(buffer.attach(stream, attach_of(how)))?;
            }
            Op::Typed { b, s } => {
                self.open_gates();
                let (Some(buffer), Some(stream)) = (self.buf(b), self.stream(s)) else {
                    return skip("no buffer or stream");
                };
                say(format!(
                    "let t = DeviceBuffer::<u32>::from_bytes(&b{})?; let v = t.to_vec(&s{1})?; t.copy_from(&v, &s{1})?; t.slice(0..t.len() / 2)?;",
                    idx(b, SLOTS),
                    idx(s, SLOTS)
                ));
                let typed = report(DeviceBuffer::<u32>::from_bytes(buffer))?;
                let values = report(typed.to_vec(stream))?;
                report(typed.copy_from(&values, stream))?;
                report(typed.slice(0..typed.len() / 2))?;
            }
            Op::IpcRoundTrip { b, src, s, dev } => {
                let dev = self.dev(dev);
                let (Some(source), Some(stream)) =
                    (self.buf(src).cloned(), self.stream(s).cloned())
                else {
                    return skip("no buffer or stream");
                };
                say(format!(
                    "let pool = b{1}.pool().unwrap(); let imported = MemoryPoolHandle::import_posix_fd(pool.export_posix_fd()?.as_fd(), {dev})?; let b{0} = DevicePtrHandle::import_ipc(&imported, &b{1}.export_ipc()?, &s{2})?;",
                    idx(b, SLOTS),
                    idx(src, SLOTS),
                    idx(s, SLOTS)
                ));
                let pointer = report(source.export_ipc())?;
                let Some(pool) = source.pool().clone() else {
                    return skip("the buffer has no pool");
                };
                let fd = report(pool.export_posix_fd())?;
                let imported = report(MemoryPoolHandle::import_posix_fd(fd.as_fd(), dev))?;
                let buffer = report(DevicePtrHandle::import_ipc(&imported, &pointer, &stream))?;
                self.drop_buf(b);
                self.bufs[idx(b, SLOTS)] = Some(buffer);
            }
            Op::Vmm {
                b,
                dev,
                chunks,
                access,
                export,
            } => {
                let dev = self.dev(dev);
                let at = PoolLocation::Device(dev);
                let devices: Vec<usize> = match access % 3 {
                    0 => vec![dev],
                    1 => vec![(dev + 1) % self.devices],
                    _ => (0..self.devices).collect(),
                };
                let sharing = if export {
                    Sharing::PosixFd
                } else {
                    Sharing::None
                };
                say(format!(
                    "let g = granularity(PoolLocation::{at:?})?; let size = {chunks} * g; let physical = PhysicalAllocationHandle::create(PoolLocation::{at:?}, size, Sharing::{sharing:?})?;"
                ));
                let g = report(granularity(at))?;
                let size = g * usize::from(chunks.max(1));
                let mut physical = report(PhysicalAllocationHandle::create(at, size, sharing))?;
                if export {
                    say(
                        "let physical = PhysicalAllocationHandle::import_posix_fd(physical.export_posix_fd()?.as_fd(), location, size)?; // this process",
                    );
                    let fd = report(physical.export_posix_fd())?;
                    physical = report(PhysicalAllocationHandle::import_posix_fd(
                        fd.as_fd(),
                        at,
                        size,
                    ))?;
                }
                say(format!(
                    "let b{} = MappingHandle::map(&AddressReservationHandle::reserve(size, g)?, 0, &physical, 0, size, &{devices:?})?.device_ptr();",
                    idx(b, SLOTS)
                ));
                let reservation = report(AddressReservationHandle::reserve(size, g))?;
                let mapping = report(MappingHandle::map(
                    &reservation,
                    0,
                    &physical,
                    0,
                    size,
                    &devices,
                ))?;
                self.drop_buf(b);
                self.bufs[idx(b, SLOTS)] = Some(mapping.device_ptr());
            }
            Op::Growable { b, dev, grow } => {
                let dev = self.dev(dev);
                say(format!(
                    "let grow = GrowableBuffer::new({dev}, 64 << 20, 2 << 20)?; grow.grow_to({grow})?; let b{} = grow.slice(0, grow.len().min(4096))?;",
                    idx(b, SLOTS)
                ));
                let growable = report(GrowableBuffer::new(dev, 64 << 20, 2 << 20))?;
                report(growable.grow_to(grow as usize))?;
                let slice = report(growable.slice(0, growable.len().min(4096)))?;
                self.drop_buf(b);
                self.bufs[idx(b, SLOTS)] = Some(slice);
            }
            Op::CudarcSlice { b, dev, n } => {
                let dev = self.dev(dev);
                say(format!(
                    "let b{} = DevicePtrHandle::from_cudarc_slice(CudaContext::new({dev})?.default_stream().alloc_zeros::<u32>({n})?)?;",
                    idx(b, SLOTS)
                ));
                let slice = CudaContext::new(dev)
                    .and_then(|context| context.default_stream().alloc_zeros::<u32>(n as usize));
                match slice {
                    Ok(slice) => {
                        let buffer = report(DevicePtrHandle::from_cudarc_slice(slice))?;
                        self.drop_buf(b);
                        self.bufs[idx(b, SLOTS)] = Some(buffer);
                    }
                    Err(error) => say(format!("    // -> cudarc: Err({error:?})")),
                }
            }
            Op::DropBuf { b } => {
                say(format!("drop(b{});", idx(b, SLOTS)));
                self.drop_buf(b);
            }
            // Kernels.
            Op::Launch {
                k,
                b,
                b2,
                s,
                n,
                block,
            } => return self.launch(k, b, b2, s, n, block),
            Op::LaunchEx {
                b,
                s,
                n,
                cluster,
                coop,
                programmatic,
                event,
            } => {
                let (Some(buffer), Some(stream)) = (self.buf(b).cloned(), self.stream(s).cloned())
                else {
                    return skip("no buffer or stream");
                };
                let cluster = [None, Some([1, 1, 1]), Some([2, 1, 1]), Some([16, 1, 1])]
                    [cluster as usize % 4];
                let programmatic_event = if event == 255 {
                    None
                } else {
                    self.event(event)
                        .map(|e| handles_cuda::code::ProgrammaticEvent {
                            event: (**e).clone(),
                            trigger_at_block_start: false,
                        })
                };
                let options = handles_cuda::code::LaunchOptions {
                    cluster,
                    cooperative: coop,
                    programmatic_serialization: programmatic,
                    programmatic_event,
                    ..Default::default()
                };
                say(format!(
                    "kernels.fill.launch_ex(&s{}, &LaunchConfig::linear({n}, 128), &{options:?}, (&b{}, 7, {n}))?;",
                    idx(s, SLOTS),
                    idx(b, SLOTS)
                ));
                let kernels = self.kernels()?;
                report(kernels.fill.launch_ex(
                    &stream,
                    &LaunchConfig::linear(n, 128),
                    &options,
                    (&buffer, 7, n),
                ))?;
            }
            Op::BlockSize { c, action, arg } => return self.block_size(c, action, arg),
            Op::Occupancy { c, block } => {
                let Some(context) = self.ctx(c).cloned() else {
                    return skip("no context");
                };
                say(format!(
                    "kernels.fill.kernel().max_active_blocks_per_sm(&c{0}, {block}, 0, OccupancyFlags::Default)?; .available_dynamic_shared(&c{0}, 1, {block})?;",
                    idx(c, SLOTS)
                ));
                let kernel = self.kernels()?.fill.kernel().clone();
                report(kernel.max_active_blocks_per_sm(
                    &context,
                    block,
                    0,
                    OccupancyFlags::Default,
                ))?;
                report(kernel.available_dynamic_shared(&context, 1, block))?;
            }
            Op::KernelAttr { dev, which } => {
                let dev = self.dev(dev);
                let kernel = self.kernels()?.fill.kernel().clone();
                match which {
                    AttrSel::Get => {
                        say(format!(
                            "kernels.fill.kernel().attribute(KernelAttribute::MaxThreadsPerBlock, {dev})?;"
                        ));
                        report(kernel.attribute(KernelAttribute::MaxThreadsPerBlock, dev))?;
                    }
                    AttrSel::SetShared => {
                        say(format!(
                            "kernels.fill.kernel().set_attribute(KernelAttribute::MaxDynamicSharedSizeBytes, 1024, {dev})?;"
                        ));
                        report(kernel.set_attribute(
                            KernelAttribute::MaxDynamicSharedSizeBytes,
                            1024,
                            dev,
                        ))?;
                    }
                }
            }
            Op::TensorMap { b, im2col } => {
                let Some(buffer) = self.buf(b) else {
                    return skip("no buffer");
                };
                let typed = report(DeviceBuffer::<u32>::from_bytes(buffer))?;
                if im2col {
                    let images = (typed.len() / 64).max(1) as u64;
                    say(format!(
                        "TensorMap::im2col(&DeviceBuffer::<u32>::from_bytes(&b{})?, &Im2colTensor::nhwc(4, 4, 4, {images}, 4, 4, 4))?;",
                        idx(b, SLOTS)
                    ));
                    report(TensorMap::im2col(
                        &typed,
                        &Im2colTensor::nhwc(4, 4, 4, images, 4, 4, 4),
                    ))?;
                } else {
                    let rows = (typed.len() / 16).max(1) as u64;
                    say(format!(
                        "TensorMap::tiled(&DeviceBuffer::<u32>::from_bytes(&b{})?, &TiledTensor::matrix(16, {rows}, 4, 8, 1))?;",
                        idx(b, SLOTS)
                    ));
                    report(TensorMap::tiled(
                        &typed,
                        &TiledTensor::matrix(16, rows, 4, 8, 1),
                    ))?;
                }
            }
            Op::PanickingBounds { b, s } => {
                let (Some(buffer), Some(stream)) = (self.buf(b).cloned(), self.stream(s).cloned())
                else {
                    return skip("no buffer or stream");
                };
                let kernel = self.kernels()?.fill.kernel().clone();
                say(format!(
                    "unsafe {{ kernel(\"fill_u32\").typed::<(Buffer, u32, u32)>(|_, _| panic_any(UserPanic)) }}?.launch(&s{}, .., (&b{}, 1, 16))?; // the panic propagates",
                    idx(s, SLOTS),
                    idx(b, SLOTS)
                ));
                // SAFETY: `fill_u32(dst, value, n)` takes a pointer and two `u32`s; the bounds
                // check never lets a launch through (it panics).
                let typed = report(unsafe {
                    kernel.typed::<(Buffer, u32, u32)>(|_, _| -> Result<(), Error> {
                        std::panic::panic_any(UserPanic("a bounds check panicked"))
                    })
                })?;
                report(typed.launch(&stream, &LaunchConfig::linear(16, 128), (&buffer, 1, 16)))?;
            }
            Op::DropLibrary {} => {
                say("drop(kernels); drop(set_from);");
                self.kernels = None;
                self.set_from = None;
            }
            // Graphs.
            Op::GraphNew { g, c } => {
                let Some(context) = self.ctx(c).cloned() else {
                    return skip("no context");
                };
                self.graphs[idx(g, SLOTS)] = None;
                say(format!(
                    "let g{} = GraphHandle::create(&c{})?;",
                    idx(g, SLOTS),
                    idx(c, SLOTS)
                ));
                self.graphs[idx(g, SLOTS)] = Some(report(GraphHandle::create(&context))?);
            }
            Op::Capture {
                g,
                c,
                mode,
                body,
                b,
                s,
            } => return self.capture(g, c, mode, body, b, s),
            Op::NodeKernel { g, b, n, dep } => {
                let (Some(graph), Some(buffer)) = (self.graph(g).cloned(), self.buf(b).cloned())
                else {
                    return skip("no graph or buffer");
                };
                let (deps, text) = self.deps(dep);
                say(format!(
                    "g{}.add_kernel_node({text}, &kernels.fill, &LaunchConfig::linear({n}, 128), (&b{}, 1, {n}))?;",
                    idx(g, SLOTS),
                    idx(b, SLOTS)
                ));
                let kernels = self.kernels()?;
                let node = graph.add_kernel_node(
                    &deps,
                    &kernels.fill,
                    &LaunchConfig::linear(n, 128),
                    (&buffer, 1, n),
                );
                return self.add_node(node);
            }
            Op::NodeMemset { g, b, dep } => {
                let (Some(graph), Some(buffer)) = (self.graph(g), self.buf(b)) else {
                    return skip("no graph or buffer");
                };
                let (deps, text) = self.deps(dep);
                let len = buffer.size().min(64);
                say(format!(
                    "g{}.add_memset_node({text}, &b{}, 0, 9, {len})?;",
                    idx(g, SLOTS),
                    idx(b, SLOTS)
                ));
                let node = graph.add_memset_node(&deps, buffer, 0, 9, len);
                return self.add_node(node);
            }
            Op::NodeCopy { g, b, b2, dep } => {
                let (Some(graph), Some(from), Some(to)) =
                    (self.graph(g), self.buf(b), self.buf(b2))
                else {
                    return skip("no graph or buffers");
                };
                let (deps, text) = self.deps(dep);
                let len = from.size().min(to.size()).min(64);
                say(format!(
                    "g{}.add_copy_node({text}, &b{}, 0, &b{}, 0, {len})?;",
                    idx(g, SLOTS),
                    idx(b, SLOTS),
                    idx(b2, SLOTS)
                ));
                let node = graph.add_copy_node(&deps, from, 0, to, 0, len);
                return self.add_node(node);
            }
            Op::NodeEventRecord { g, e, dep } | Op::NodeEventWait { g, e, dep } => {
                let (Some(graph), Some(event)) = (self.graph(g), self.event(e)) else {
                    return skip("no graph or event");
                };
                let (deps, text) = self.deps(dep);
                let record = matches!(op, Op::NodeEventRecord { .. });
                let id = event.id;
                say(format!(
                    "g{}.add_event_{}_node({text}, &e{})?;",
                    idx(g, SLOTS),
                    if record { "record" } else { "wait" },
                    idx(e, SLOTS)
                ));
                let node = if record {
                    graph.add_event_record_node(&deps, event)
                } else {
                    graph.add_event_wait_node(&deps, event)
                };
                if record {
                    self.tainted.insert(id);
                }
                return self.add_node(node);
            }
            Op::NodeEmpty { g, dep } => {
                let Some(graph) = self.graph(g) else {
                    return skip("no graph");
                };
                let (deps, text) = self.deps(dep);
                say(format!("g{}.add_empty_node({text})?;", idx(g, SLOTS)));
                let node = graph.add_empty_node(&deps);
                return self.add_node(node);
            }
            Op::NodeHost { g, body, arg, dep } => {
                let Some(graph) = self.graph(g).cloned() else {
                    return skip("no graph");
                };
                let (deps, text) = self.deps(dep);
                let buffer = match body {
                    HostBody::PanicWithHandle => self.bufs[idx(arg, SLOTS)].take(),
                    HostBody::Capture | HostBody::CaptureSlow => self.buf(arg).cloned(),
                    _ => None,
                };
                let bomb = match body {
                    HostBody::CaptureBomb => self.bombs[idx(arg, SLOTS)].take(),
                    _ => None,
                };
                say(format!(
                    "g{}.add_host_node({text}, {})?;",
                    idx(g, SLOTS),
                    host_text(body, arg, 0)
                ));
                let closure = Mutex::new(host_closure(body, buffer, None, bomb));
                let node = graph.add_host_node(&deps, move || {
                    let mut call = closure.lock().unwrap_or_else(|e| e.into_inner());
                    (*call)()
                });
                return self.add_node(node);
            }
            Op::NodeChild { g, child, dep } => {
                let (Some(graph), Some(inner)) = (self.graph(g), self.graph(child)) else {
                    return skip("no graphs");
                };
                let (deps, text) = self.deps(dep);
                say(format!(
                    "g{}.add_child_graph_node({text}, &g{})?;",
                    idx(g, SLOTS),
                    idx(child, SLOTS)
                ));
                let node = graph.add_child_graph_node(&deps, inner);
                return self.add_node(node);
            }
            Op::NodeMemAlloc { g, b, size, dep } => {
                let Some(graph) = self.graph(g).cloned() else {
                    return skip("no graph");
                };
                let (deps, text) = self.deps(dep);
                say(format!(
                    "let (n{}, b{}) = g{}.add_mem_alloc_node({text}, {size})?;",
                    self.nodes.len(),
                    idx(b, SLOTS),
                    idx(g, SLOTS)
                ));
                let (node, memory) = report(graph.add_mem_alloc_node(&deps, size as usize))?;
                self.nodes.push(node);
                self.drop_buf(b);
                self.bufs[idx(b, SLOTS)] = Some(memory);
            }
            Op::NodeMemFree { g, b, dep } => {
                let (Some(graph), Some(memory)) = (self.graph(g), self.buf(b)) else {
                    return skip("no graph or buffer");
                };
                let (deps, text) = self.deps(dep);
                say(format!(
                    "g{}.add_mem_free_node({text}, &b{})?;",
                    idx(g, SLOTS),
                    idx(b, SLOTS)
                ));
                let node = graph.add_mem_free_node(&deps, memory);
                return self.add_node(node);
            }
            Op::CondCreate { h, g, default } => {
                let Some(graph) = self.graph(g) else {
                    return skip("no graph");
                };
                let value = default.checked_sub(1).map(u32::from);
                say(format!(
                    "let h{} = g{}.create_conditional({value:?})?;",
                    idx(h, SLOTS),
                    idx(g, SLOTS)
                ));
                let handle = report(graph.create_conditional(value))?;
                self.conds[idx(h, SLOTS)] = Some(handle);
            }
            Op::CondNode {
                g,
                h,
                kind,
                n,
                dep,
                body,
            } => {
                let (Some(graph), Some(handle)) =
                    (self.graph(g).cloned(), self.conds[idx(h, SLOTS)].clone())
                else {
                    return skip("no graph or conditional handle");
                };
                let (deps, text) = self.deps(dep);
                let kind = match kind {
                    CondKind::If => ConditionalKind::If,
                    CondKind::IfElse => ConditionalKind::IfElse,
                    CondKind::While => ConditionalKind::While,
                    CondKind::Switch => ConditionalKind::Switch(n),
                };
                say(format!(
                    "let cn = g{}.add_conditional_node({text}, &h{}, ConditionalKind::{kind:?})?;",
                    idx(g, SLOTS),
                    idx(h, SLOTS)
                ));
                let made = report(graph.add_conditional_node(&deps, &handle, kind))?;
                say(format!("    // n{} = cn.node", self.nodes.len()));
                self.nodes.push(made.node);
                if body != 255
                    && let Some(first) = made.bodies.into_iter().next()
                {
                    say(format!("let g{} = cn.bodies[0];", idx(body, SLOTS)));
                    self.graphs[idx(body, SLOTS)] = Some(first);
                }
            }
            Op::NodeSetCond { g, h, b, dep } => {
                let (Some(graph), Some(handle), Some(selector)) = (
                    self.graph(g).cloned(),
                    self.conds[idx(h, SLOTS)].clone(),
                    self.buf(b).cloned(),
                ) else {
                    return skip("no graph, conditional handle or buffer");
                };
                let (deps, text) = self.deps(dep);
                let kernel = self.set_from()?.clone();
                say(format!(
                    "g{}.add_kernel_node({text}, &set_from, &LaunchConfig::linear(1, 1), (&h{}, &b{}))?;",
                    idx(g, SLOTS),
                    idx(h, SLOTS),
                    idx(b, SLOTS)
                ));
                let node = graph.add_kernel_node(
                    &deps,
                    &kernel,
                    &LaunchConfig::linear(1, 1),
                    (&handle, &selector),
                );
                return self.add_node(node);
            }
            Op::Instantiate { x, g } => {
                let Some(graph) = self.graph(g) else {
                    return skip("no graph");
                };
                say(format!(
                    "let x{} = g{}.instantiate()?;",
                    idx(x, SLOTS),
                    idx(g, SLOTS)
                ));
                let exec = report(graph.instantiate())?;
                self.execs[idx(x, SLOTS)] = Some(exec);
            }
            Op::ExecLaunch { x, s } => {
                let (Some(exec), Some(stream)) =
                    (self.execs[idx(x, SLOTS)].as_ref(), self.stream(s))
                else {
                    return skip("no executable graph or stream");
                };
                say(format!("x{}.launch(&s{})?;", idx(x, SLOTS), idx(s, SLOTS)));
                report(exec.launch(stream))?;
            }
            Op::ExecUpdate { x, g } => {
                let (Some(exec), Some(graph)) = (self.execs[idx(x, SLOTS)].as_ref(), self.graph(g))
                else {
                    return skip("no executable graph or graph");
                };
                say(format!("x{}.update(&g{})?;", idx(x, SLOTS), idx(g, SLOTS)));
                report(exec.update(graph))?;
            }
            Op::ExecSetMemset { x, node, b } => {
                let (Some(exec), Some(buffer), Some((node, index))) = (
                    self.execs[idx(x, SLOTS)].as_ref(),
                    self.buf(b),
                    self.node(node),
                ) else {
                    return skip("no executable graph, buffer or node");
                };
                let len = buffer.size().min(64);
                say(format!(
                    "x{}.set_memset_node_params(n{index}, &b{}, 0, 3, {len})?;",
                    idx(x, SLOTS),
                    idx(b, SLOTS)
                ));
                report(exec.set_memset_node_params(node, buffer, 0, 3, len))?;
            }
            Op::ExecEnable { x, node, on } => {
                let (Some(exec), Some((node, index))) =
                    (self.execs[idx(x, SLOTS)].as_ref(), self.node(node))
                else {
                    return skip("no executable graph or node");
                };
                say(format!(
                    "x{}.set_node_enabled(n{index}, {on})?; x{0}.node_enabled(n{index})?;",
                    idx(x, SLOTS)
                ));
                report(exec.set_node_enabled(node, on))?;
                report(exec.node_enabled(node))?;
            }
            Op::ExecSetKernel { x, node, b, n } => {
                let (Some(exec), Some(buffer), Some((node, index))) = (
                    self.execs[idx(x, SLOTS)].clone(),
                    self.buf(b).cloned(),
                    self.node(node),
                ) else {
                    return skip("no executable graph, buffer or node");
                };
                let fill = self.kernels()?.fill.clone();
                say(format!(
                    "x{}.set_kernel_node_params(n{index}, &kernels.fill, &LaunchConfig::linear({n}, 128), (&b{}, 2, {n}))?;",
                    idx(x, SLOTS),
                    idx(b, SLOTS)
                ));
                report(exec.set_kernel_node_params(
                    node,
                    &fill,
                    &LaunchConfig::linear(n, 128),
                    (&buffer, 2, n),
                ))?;
            }
            Op::ExecSetCopy { x, node, b, b2 } => {
                let (Some(exec), Some(from), Some(to), Some((node, index))) = (
                    self.execs[idx(x, SLOTS)].as_ref(),
                    self.buf(b),
                    self.buf(b2),
                    self.node(node),
                ) else {
                    return skip("no executable graph, buffers or node");
                };
                let len = from.size().min(to.size()).min(64);
                say(format!(
                    "x{}.set_copy_node_params(n{index}, &b{}, 0, &b{}, 0, {len})?;",
                    idx(x, SLOTS),
                    idx(b, SLOTS),
                    idx(b2, SLOTS)
                ));
                report(exec.set_copy_node_params(node, from, 0, to, 0, len))?;
            }
            Op::DropGraph { g } => {
                say(format!("drop(g{});", idx(g, SLOTS)));
                self.graphs[idx(g, SLOTS)] = None;
            }
            Op::DropExec { x } => {
                say(format!("drop(x{});", idx(x, SLOTS)));
                self.execs[idx(x, SLOTS)] = None;
            }
            // Threads and bombs.
            Op::Thread { t, job, a, b } => return self.thread(t, job, a, b),
            Op::Join { t } => {
                self.open_gates();
                let Some(thread) = self.threads[idx(t, THREADS)].take() else {
                    return skip("no thread");
                };
                say(format!("t{}.join();", idx(t, THREADS)));
                if thread.join().is_err() {
                    fail("a thread of the program panicked outside its own catch");
                    self.failed = true;
                }
            }
            Op::Bomb {
                k,
                armed,
                owns,
                chain,
            } => {
                let buffer = if owns == 255 {
                    None
                } else {
                    self.buf(owns).cloned()
                };
                let owned = if buffer.is_some() {
                    format!("Some(b{}.clone())", idx(owns, SLOTS))
                } else {
                    "None".into()
                };
                let next = if chain == 255 {
                    None
                } else {
                    self.bombs[idx(chain, SLOTS)].clone()
                };
                let chained = if next.is_some() {
                    format!("Some(bomb{}.clone())", idx(chain, SLOTS))
                } else {
                    "None".into()
                };
                say(format!(
                    "drop(bomb{0}); let bomb{0} = BombHandle::from_raw(id, Bomb {{ fuse: Fuse({armed}), buffer: {owned}, next: {chained} }});",
                    idx(k, SLOTS)
                ));
                self.bombs[idx(k, SLOTS)] = None;
                let id = self.fresh_id();
                // SAFETY: a fresh stand-in id that nothing else owns; the deleter does nothing.
                let bomb = unsafe {
                    BombHandle::from_raw(
                        id,
                        Bomb {
                            fuse: Fuse(armed),
                            buffer,
                            next,
                        },
                    )
                };
                self.bombs[idx(k, SLOTS)] = Some(bomb);
            }
            Op::DropBomb { k } => {
                say(format!(
                    "drop(bomb{}); // may panic: its record's Drop",
                    idx(k, SLOTS)
                ));
                self.bombs[idx(k, SLOTS)] = None;
            }
        }
        Ok(())
    }

    fn drop_ctx(&mut self, c: u8) {
        self.ctx[idx(c, SLOTS)] = None;
    }

    fn drop_stream(&mut self, s: u8) {
        self.streams[idx(s, SLOTS)] = None;
    }

    fn drop_event(&mut self, e: u8) {
        self.events[idx(e, SLOTS)] = None;
    }

    fn drop_buf(&mut self, b: u8) {
        self.bufs[idx(b, SLOTS)] = None;
    }

    fn run_op(&mut self, c: u8, body: RunBody, arg: u8) -> Step {
        let Some(context) = self.ctx(c).cloned() else {
            return skip("no context");
        };
        let name = format!("c{}", idx(c, SLOTS));
        let a = idx(arg, SLOTS);
        let result = match body {
            RunBody::Ok => {
                say(format!("{name}.run(|| Ok(()))?;"));
                context.run(|| Ok::<_, Error>(()))
            }
            RunBody::Err => {
                say(format!("{name}.run(|| Err(user_error()))?;"));
                context.run(|| Err::<(), _>(user_error()))
            }
            RunBody::Panic => {
                say(format!(
                    "{name}.run(|| panic_any(UserPanic))?; // the panic propagates"
                ));
                context.run(|| -> Result<(), Error> {
                    std::panic::panic_any(UserPanic("a run's closure panicked"))
                })
            }
            RunBody::PanicHoldingBomb => {
                let Some(bomb) = self.bombs[a].take() else {
                    return skip("no bomb");
                };
                say(format!(
                    "{name}.run(move || {{ let _held = bomb{a}; panic_any(UserPanic) }})?; // the bomb drops while the panic unwinds"
                ));
                context.run(move || -> Result<(), Error> {
                    let _held = bomb;
                    std::panic::panic_any(UserPanic("a run's closure panicked holding a bomb"))
                })
            }
            RunBody::PanicWithHandle => {
                let Some(buffer) = self.bufs[a].take() else {
                    return skip("no buffer");
                };
                say(format!("{name}.run(move || panic_any(b{a}))?;"));
                context.run(move || -> Result<(), Error> { std::panic::panic_any(buffer) })
            }
            RunBody::Nested => {
                let Some(inner) = self.ctx(arg).cloned() else {
                    return skip("no inner context");
                };
                say(format!("{name}.run(|| c{a}.run(|| Ok(())))?;"));
                context.run(|| inner.run(|| Ok::<_, Error>(())))
            }
            RunBody::Bind => {
                let Some(inner) = self.ctx(arg).cloned() else {
                    return skip("no inner context");
                };
                say(format!("{name}.run(|| c{a}.bind_to_thread())?;"));
                context.run(|| inner.bind_to_thread())
            }
            RunBody::Unbind => {
                say(format!("{name}.run(ContextHandle::unbind_thread)?;"));
                context.run(ContextHandle::unbind_thread)
            }
            RunBody::WorkInCurrent => {
                say(format!(
                    "{name}.run(|| {{ let e = EventHandle::create_in_current(EventFlags::default())?; e.record(&StreamHandle::per_thread())?; e.synchronize() }})?;"
                ));
                context.run(|| {
                    let event = EventHandle::create_in_current(EventFlags::default())?;
                    event.record(&StreamHandle::per_thread())?;
                    event.synchronize()
                })
            }
            RunBody::DropBuffer => {
                let Some(buffer) = self.bufs[a].take() else {
                    return skip("no buffer");
                };
                say(format!("{name}.run(move || {{ drop(b{a}); Ok(()) }})?;"));
                context.run(move || {
                    drop(buffer);
                    Ok::<_, Error>(())
                })
            }
        };
        report(result)?;
        Ok(())
    }

    fn host_view(&mut self, b: u8, s: u8, inner: ViewInner) -> Step {
        let Some(buffer) = self.buf(b).cloned() else {
            return skip("no buffer");
        };
        let name = format!("b{}", idx(b, SLOTS));
        match inner {
            ViewInner::Read => {
                say(format!(
                    "let sum: u64 = {name}.host_view()?.iter().map(|&x| u64::from(x)).sum();"
                ));
                let view = report(buffer.host_view())?;
                let sum: u64 = view.iter().map(|&x| u64::from(x)).sum();
                say(format!("    // -> sum {sum}"));
            }
            ViewInner::Write => {
                say(format!("{name}.host_view_mut()?.fill(3);"));
                let mut view = report(buffer.host_view_mut())?;
                view.fill(3);
            }
            ViewInner::MemsetWhileOpen => {
                let Some(stream) = self.stream(s).cloned() else {
                    return skip("no stream");
                };
                say(format!(
                    "let view = {name}.host_view()?; {name}.memset_async(1, {name}.size(), &s{})?; // refused while the view lives",
                    idx(s, SLOTS)
                ));
                let view = report(buffer.host_view())?;
                let before: Vec<u8> = view.to_vec();
                let queued = report(buffer.memset_async(1, buffer.size(), &stream));
                if queued.is_ok() {
                    let _ = stream.synchronize();
                    if view.to_vec() != before {
                        fail(
                            "a memset was accepted while a host view was open, and changed its bytes",
                        );
                        self.failed = true;
                    } else {
                        fail("a memset was accepted while a host view was open");
                        self.failed = true;
                    }
                }
                drop(view);
            }
            ViewInner::SecondView => {
                say(format!(
                    "let view = {name}.host_view()?; {name}.host_view_mut()?; // refused while the first lives"
                ));
                let view = report(buffer.host_view())?;
                let second = report(buffer.host_view_mut());
                if second.is_ok() {
                    fail("a mutable host view was lent while a shared one was open");
                    self.failed = true;
                }
                drop(second);
                drop(view);
            }
        }
        Ok(())
    }

    fn launch(&mut self, k: KernelSel, b: u8, b2: u8, s: u8, n: u32, block: u32) -> Step {
        let (Some(buffer), Some(stream)) = (self.buf(b).cloned(), self.stream(s).cloned()) else {
            return skip("no buffer or stream");
        };
        let other = self.buf(b2).cloned();
        let config = LaunchConfig::linear(n, block);
        let (bn, sn, on) = (idx(b, SLOTS), idx(s, SLOTS), idx(b2, SLOTS));
        let kernels = self.kernels()?;
        let cfg = format!("&LaunchConfig::linear({n}, {block})");
        let launched = match k {
            KernelSel::Fill => {
                say(format!(
                    "kernels.fill.launch(&s{sn}, {cfg}, (&b{bn}, 7, {n}))?;"
                ));
                kernels.fill.launch(&stream, &config, (&buffer, 7, n))
            }
            KernelSel::Add => {
                say(format!(
                    "kernels.add.launch(&s{sn}, {cfg}, (&b{bn}, 1, {n}))?;"
                ));
                kernels.add.launch(&stream, &config, (&buffer, 1, n))
            }
            KernelSel::Copy => {
                let Some(other) = other else {
                    return skip("no second buffer");
                };
                say(format!(
                    "kernels.copy.launch(&s{sn}, {cfg}, (&b{bn}, &b{on}, {n}))?;"
                ));
                kernels.copy.launch(&stream, &config, (&buffer, &other, n))
            }
            KernelSel::AddOne => {
                say(format!(
                    "kernels.add_one.launch(&s{sn}, {cfg}, (&b{bn}, {n}))?;"
                ));
                kernels.add_one.launch(&stream, &config, (&buffer, n))
            }
            KernelSel::Spin => {
                say(format!("kernels.spin.launch(&s{sn}, {cfg}, (1000,))?;"));
                kernels.spin.launch(&stream, &config, (1000,))
            }
        };
        report(launched)?;
        Ok(())
    }

    fn block_size(&mut self, c: u8, action: PerBlock, arg: u8) -> Step {
        let Some(context) = self.ctx(c).cloned() else {
            return skip("no context");
        };
        let shared = match action {
            PerBlock::Fixed => SharedPerBlock::Fixed(0),
            PerBlock::PerWarp => SharedPerBlock::PerBlock(per_warp),
            PerBlock::Unbind => SharedPerBlock::PerBlock(per_block_unbind),
            PerBlock::Rebind => {
                let target = self.ctx(arg).cloned();
                REBIND_TO.with(|slot| *slot.borrow_mut() = target);
                SharedPerBlock::PerBlock(per_block_rebind)
            }
            PerBlock::Panic => SharedPerBlock::PerBlock(per_block_panic),
            PerBlock::MakeStream => SharedPerBlock::PerBlock(per_block_stream),
            PerBlock::ClearCache => SharedPerBlock::PerBlock(per_block_clear),
        };
        let function = match action {
            PerBlock::Fixed => "SharedPerBlock::Fixed(0)".to_string(),
            PerBlock::PerWarp => "SharedPerBlock::PerBlock(|block| block.div_ceil(32) * 64)".into(),
            PerBlock::Unbind => {
                "SharedPerBlock::PerBlock(|_| { let _ = ContextHandle::unbind_thread(); 0 })".into()
            }
            PerBlock::Rebind => format!(
                "SharedPerBlock::PerBlock(|_| {{ let _ = c{}.bind_to_thread(); 0 }})",
                idx(arg, SLOTS)
            ),
            PerBlock::Panic => "SharedPerBlock::PerBlock(|_| panic_any(UserPanic))".into(),
            PerBlock::MakeStream => "SharedPerBlock::PerBlock(|_| { drop(StreamHandle::create(&ContextHandle::current()?.unwrap(), ..)); 0 })".into(),
            PerBlock::ClearCache => "SharedPerBlock::PerBlock(|_| { clear_primary_cache(); 0 })".into(),
        };
        say(format!(
            "kernels.fill.kernel().potential_block_size(&c{}, {function}, 0, OccupancyFlags::Default)?;",
            idx(c, SLOTS)
        ));
        let kernel = self.kernels()?.fill.kernel().clone();
        let answer = kernel.potential_block_size(&context, shared, 0, OccupancyFlags::Default);
        REBIND_TO.with(|slot| slot.borrow_mut().take());
        report(answer)?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn capture(&mut self, g: u8, c: u8, mode: Mode, body: CaptureBody, b: u8, s: u8) -> Step {
        let Some(context) = self.ctx(c).cloned() else {
            return skip("no context");
        };
        let mode = match mode {
            Mode::Global => CaptureMode::Global,
            Mode::ThreadLocal => CaptureMode::ThreadLocal,
            Mode::Relaxed => CaptureMode::Relaxed,
        };
        let buffer = match body {
            CaptureBody::DropInside => self.bufs[idx(b, SLOTS)].take(),
            _ => self.buf(b).cloned(),
        };
        let outside = self.stream(s).cloned();
        let bn = idx(b, SLOTS);
        say(format!(
            "let g{} = GraphHandle::capture(&c{}, CaptureMode::{mode:?}, |cap| {{ {} }})?;",
            idx(g, SLOTS),
            idx(c, SLOTS),
            capture_text(body, bn, idx(s, SLOTS))
        ));
        let kernels = if matches!(body, CaptureBody::Launch | CaptureBody::ForkJoin) {
            Some(self.kernels()?.fill.clone())
        } else {
            None
        };
        let captured = GraphHandle::capture(&context, mode, |cap| {
            let Some(buffer) = buffer else {
                return Ok(());
            };
            let len = buffer.size().min(64);
            let n = u32::try_from(buffer.size() / 4)
                .unwrap_or(u32::MAX)
                .min(1024);
            match body {
                CaptureBody::Memset => cap.memset(&buffer, 0, 1, len),
                CaptureBody::Launch => {
                    let fill = kernels.as_ref().expect("loaded for this body");
                    cap.launch(fill, &LaunchConfig::linear(n, 128), (&buffer, 7, n))
                }
                CaptureBody::ForkJoin => {
                    let fill = kernels.as_ref().expect("loaded for this body");
                    let branch = cap.fork()?;
                    branch.memset(&buffer, 0, 2, len)?;
                    cap.launch(fill, &LaunchConfig::linear(n, 128), (&buffer, 7, n))?;
                    cap.join(branch)
                }
                CaptureBody::ForkNoJoin => {
                    let branch = cap.fork()?;
                    branch.memset(&buffer, 0, 2, len)
                }
                CaptureBody::DeepFork => {
                    let first = cap.fork()?;
                    let second = first.fork()?;
                    second.memset(&buffer, 0, 3, len)?;
                    first.join(second)?;
                    cap.join(first)
                }
                CaptureBody::Copy => {
                    let half = buffer.size() / 2;
                    cap.copy(&buffer, 0, &buffer, half, half)
                }
                CaptureBody::Err => {
                    cap.memset(&buffer, 0, 1, len)?;
                    Err(user_error())
                }
                CaptureBody::Panic => {
                    cap.memset(&buffer, 0, 1, len)?;
                    std::panic::panic_any(UserPanic("a capture's closure panicked"))
                }
                CaptureBody::Outside => {
                    cap.memset(&buffer, 0, 1, len)?;
                    match &outside {
                        Some(stream) => buffer.memset_async(0, len, stream),
                        None => Ok(()),
                    }
                }
                CaptureBody::DropInside => {
                    cap.memset(&buffer, 0, 1, len)?;
                    drop(buffer);
                    Ok(())
                }
                CaptureBody::Nested => {
                    let inner = GraphHandle::capture(&context, mode, |inner| {
                        inner.memset(&buffer, 0, 4, len)
                    })?;
                    drop(inner);
                    cap.memset(&buffer, 0, 1, len)
                }
            }
        });
        let graph = report(captured)?;
        self.graphs[idx(g, SLOTS)] = Some(graph);
        Ok(())
    }

    fn thread(&mut self, t: u8, job: ThreadJob, a: u8, b: u8) -> Step {
        let t = idx(t, THREADS);
        if let Some(previous) = self.threads[t].take() {
            self.open_gates();
            say(format!("t{t}.join();"));
            let _ = previous.join();
        }
        let (an, bn) = (idx(a, SLOTS), idx(b, SLOTS));
        let body: Box<dyn FnOnce() + Send> = match job {
            ThreadJob::DropBuffer => {
                let Some(buffer) = self.bufs[an].take() else {
                    return skip("no buffer");
                };
                say(format!("let t{t} = spawn(move || drop(b{an}));"));
                Box::new(move || drop(buffer))
            }
            ThreadJob::DropStream => {
                let Some(stream) = self.streams[an].take() else {
                    return skip("no stream");
                };
                say(format!("let t{t} = spawn(move || drop(s{an}));"));
                Box::new(move || drop(stream))
            }
            ThreadJob::BindAndExit => {
                let Some(context) = self.ctx(a).cloned() else {
                    return skip("no context");
                };
                say(format!(
                    "let t{t} = spawn(move || c{an}.bind_to_thread()); // exits with it bound"
                ));
                Box::new(move || {
                    let _ = context.bind_to_thread();
                })
            }
            ThreadJob::Work => {
                let (Some(stream), Some(buffer)) = (self.stream(a).cloned(), self.buf(b).cloned())
                else {
                    return skip("no stream or buffer");
                };
                let kernels = self.kernels()?.fill.clone();
                say(format!(
                    "let t{t} = spawn(move || {{ b{bn}.memset_async(0, 64, &s{an})?; kernels.fill.launch(&s{an}, ..)?; s{an}.synchronize() }});"
                ));
                Box::new(move || {
                    let len = buffer.size().min(64);
                    let n = u32::try_from(buffer.size() / 4).unwrap_or(0).min(256);
                    let _ = buffer
                        .memset_async(0, len, &stream)
                        .map_err(|e| note_error(&e));
                    let _ = kernels
                        .launch(&stream, &LaunchConfig::linear(n, 64), (&buffer, 3, n))
                        .map_err(|e| note_error(&e));
                    let _ = stream.synchronize();
                })
            }
            ThreadJob::Await => {
                let Some(event) = self.event(a).map(|e| (**e).clone()) else {
                    return skip("no event");
                };
                say(format!(
                    "let t{t} = spawn(move || block_on(e{an}.completed()?)); // bounded"
                ));
                Box::new(move || {
                    if let Ok(mut future) = event.completed() {
                        let _ = await_bounded(&mut future, &event, false);
                    }
                })
            }
            ThreadJob::Churn => {
                let Some(context) = self.ctx(a).cloned() else {
                    return skip("no context");
                };
                say(format!(
                    "let t{t} = spawn(move || {{ streams, events and recycled ones in c{an}, dropped }});"
                ));
                Box::new(move || {
                    let churn = || -> Result<(), Error> {
                        let stream = StreamHandle::create(&context, StreamFlags::default(), 0)?;
                        let event = EventHandle::create(&context, EventFlags::default())?;
                        event.record(&stream)?;
                        let recycled =
                            StreamRecycler::new(&context, StreamFlags::default(), 0)?.acquire()?;
                        let spare =
                            EventRecycler::new(&context, EventFlags::default())?.acquire()?;
                        spare.record(&recycled)?;
                        event.synchronize()?;
                        drop((stream, event, recycled, spare));
                        Ok(())
                    };
                    if let Err(error) = churn() {
                        note_error(&error);
                    }
                })
            }
            ThreadJob::RunPanic => {
                let Some(context) = self.ctx(a).cloned() else {
                    return skip("no context");
                };
                say(format!(
                    "let t{t} = spawn(move || catch_unwind(|| c{an}.run(|| panic_any(UserPanic))));"
                ));
                Box::new(move || {
                    let _ = context.run(|| -> Result<(), Error> {
                        std::panic::panic_any(UserPanic("a thread's run panicked"))
                    });
                })
            }
        };
        let spawned = std::thread::Builder::new()
            .name(format!("fuzz-thread-{t}"))
            .spawn(move || {
                if let Err(payload) = catch_unwind(AssertUnwindSafe(body))
                    && !is_user_panic(&*payload)
                {
                    fail(format!(
                        "panic escaped from the library on a thread: {}",
                        describe_panic(&*payload)
                    ));
                }
            });
        match spawned {
            Ok(handle) => self.threads[t] = Some(handle),
            Err(error) => say(format!("    // -> no thread: {error}")),
        }
        Ok(())
    }

    /// The end of the program: every gate opened and thread joined, then (unless the program
    /// exits with live handles) every slot dropped, caches cleared, and the process left as
    /// `exit` says.
    pub fn finish(mut self, exit: Ending, reversed: bool) {
        say("// the end");
        self.open_gates();
        for thread in &mut self.threads {
            if let Some(thread) = thread.take()
                && thread.join().is_err()
            {
                fail("a thread of the program panicked outside its own catch");
            }
        }
        if exit == Ending::Live {
            say("std::process::exit(0); // with every handle alive");
            emit("fuzz-done", "live");
            std::mem::forget(self);
            std::process::exit(0);
        }
        // The program waits for its work before it lets go of everything (a program that
        // returns with work still queued leaves it to the driver's teardown, which the
        // simulator counts as left alive).
        say("for every context c (green ones too): c.synchronize()?; // every stream's work done");
        for context in self.ctx.iter().flatten() {
            if let Err(error) = context.handle.synchronize() {
                say(format!("    // c.synchronize(): Err({error:?})"));
            }
        }
        for green in std::mem::take(&mut self.greens) {
            if let Some(green) = green.upgrade()
                && let Err(error) = green.context().and_then(|context| context.synchronize())
            {
                say(format!(
                    "    // a green context's synchronize(): Err({error:?})"
                ));
            }
        }
        for ordinal in 0..self.devices {
            let synced = ContextHandle::with_primary(ordinal, ContextHandle::synchronize);
            if let Err(error) = synced.and_then(|synced| synced) {
                say(format!(
                    "    // primary {ordinal}.synchronize(): Err({error:?})"
                ));
            }
        }
        say(format!(
            "drop(everything); // {} order, then the caches cleared",
            if reversed {
                "contexts first"
            } else {
                "graphs first"
            }
        ));
        let devices = self.devices;
        let mut parts: Vec<Box<dyn FnOnce() + '_>> = vec![
            Box::new(|| drop(std::mem::take(&mut self.many))),
            Box::new(|| drop(std::mem::take(&mut self.completions))),
            Box::new(|| drop(std::mem::take(&mut self.execs))),
            Box::new(|| drop(std::mem::take(&mut self.graphs))),
            Box::new(|| drop(std::mem::take(&mut self.conds))),
            Box::new(|| drop(std::mem::take(&mut self.events))),
            Box::new(|| drop(std::mem::take(&mut self.event_recyclers))),
            Box::new(|| drop(std::mem::take(&mut self.bufs))),
            Box::new(|| drop(std::mem::take(&mut self.streams))),
            Box::new(|| drop(std::mem::take(&mut self.stream_recyclers))),
            Box::new(|| drop(std::mem::take(&mut self.pools))),
            Box::new(|| drop(std::mem::take(&mut self.kernels))),
            Box::new(|| drop(std::mem::take(&mut self.set_from))),
            Box::new(|| drop(std::mem::take(&mut self.ctx))),
        ];
        if reversed {
            parts.reverse();
        }
        for part in parts {
            // Dropping a bomb's owner... or a record that panics: caught, as anywhere else.
            if let Err(payload) = catch_unwind(AssertUnwindSafe(part))
                && !is_user_panic(&*payload)
            {
                fail(format!(
                    "panic escaped from the library at the end: {}",
                    describe_panic(&*payload)
                ));
            }
        }
        for bomb in std::mem::take(&mut self.bombs) {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| drop(bomb)))
                && !is_user_panic(&*payload)
            {
                fail(format!(
                    "panic escaped from the library at the end: {}",
                    describe_panic(&*payload)
                ));
            }
        }
        let cleanup = || -> Result<(), Error> {
            for ordinal in 0..devices {
                // A pool made the device's current one is kept by the library until replaced.
                let default = MemoryPoolHandle::device_default(ordinal)?;
                drop(default.set_device_current(ordinal)?);
            }
            Ok(())
        };
        if let Err(error) = cleanup() {
            say(format!(
                "    // restoring the default pools: Err({error:?})"
            ));
        }
        let _ = ContextHandle::unbind_thread();
        handles_cuda::exec::clear_notifiers();
        handles_cuda::exec::clear_recycled_streams();
        handles_cuda::exec::clear_recycled_events();
        StreamHandle::release_cudarc_loans();
        handles_cuda::exec::clear_primary_cache();
        emit("fuzz-done", "teardown");
        if exit == Ending::TeardownExit {
            std::process::exit(0);
        }
    }
}

fn attach_of(how: AttachKind) -> Attach {
    match how {
        AttachKind::Global => Attach::Global,
        AttachKind::Host => Attach::Host,
        AttachKind::Single => Attach::Single,
    }
}

fn host_text(body: HostBody, arg: u8, stream: usize) -> String {
    let a = idx(arg, SLOTS);
    match body {
        HostBody::Nothing => "|| {}".into(),
        HostBody::Panic => "|| panic_any(UserPanic)".into(),
        HostBody::Capture => format!(
            "{{ let (b, s) = (b{a}.clone(), s{stream}.clone()); move || {{ let _ = (&b, &s); }} }}"
        ),
        HostBody::PanicWithHandle => {
            format!(
                "{{ let mut b = Some(b{a}); move || if let Some(b) = b.take() {{ panic_any(b) }} }}"
            )
        }
        HostBody::CaptureBomb => format!("move || {{ let _ = &bomb{a}; }}"),
        HostBody::Sleep => "|| sleep(20 ms)".into(),
        HostBody::CaptureSlow => format!(
            "{{ let slow = SlowDrop(b{a}.clone(), s{stream}.clone()); move || {{ let _ = &slow; }} }} // its Drop sleeps 200 ms"
        ),
    }
}

fn capture_text(body: CaptureBody, b: usize, s: usize) -> String {
    match body {
        CaptureBody::Memset => format!("cap.memset(&b{b}, 0, 1, 64)"),
        CaptureBody::Launch => format!("cap.launch(&kernels.fill, .., (&b{b}, 7, n))"),
        CaptureBody::ForkJoin => format!(
            "let br = cap.fork()?; br.memset(&b{b}, 0, 2, 64)?; cap.launch(&kernels.fill, .., (&b{b}, 7, n))?; cap.join(br)"
        ),
        CaptureBody::ForkNoJoin => format!("let br = cap.fork()?; br.memset(&b{b}, 0, 2, 64)"),
        CaptureBody::DeepFork => format!(
            "let a = cap.fork()?; let c = a.fork()?; c.memset(&b{b}, 0, 3, 64)?; a.join(c)?; cap.join(a)"
        ),
        CaptureBody::Copy => format!("cap.copy(&b{b}, 0, &b{b}, half, half)"),
        CaptureBody::Err => format!("cap.memset(&b{b}, 0, 1, 64)?; Err(user_error())"),
        CaptureBody::Panic => format!("cap.memset(&b{b}, 0, 1, 64)?; panic_any(UserPanic)"),
        CaptureBody::Outside => {
            format!("cap.memset(&b{b}, 0, 1, 64)?; b{b}.memset_async(0, 64, &s{s})")
        }
        CaptureBody::DropInside => format!("cap.memset(&b{b}, 0, 1, 64)?; drop(b{b}); Ok(())"),
        CaptureBody::Nested => format!(
            "drop(GraphHandle::capture(&c, mode, |inner| inner.memset(&b{b}, 0, 4, 64))?); cap.memset(&b{b}, 0, 1, 64)"
        ),
    }
}

/// Runs `program` in this process (the child): every op, then the end. Installs the report
/// hook and a quiet panic hook first.
pub fn run(program: &Program) {
    handles_core::set_report_hook(|failure| {
        emit(
            "fuzz-report",
            &format!(
                "{} {:#x}: {}",
                failure.type_name, failure.raw, failure.error
            ),
        );
    });
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let what = describe_panic(info.payload());
        let thread = std::thread::current();
        emit(
            "fuzz-panic",
            &format!("{} at {location}: {what}", thread.name().unwrap_or("?")),
        );
    }));
    say(format!(
        "// devices: {}, exit: {:?}; a panic on purpose is `panic_any(UserPanic(..))`",
        program.devices, program.exit
    ));
    let mut state = State::new(program.devices as usize);
    for (index, op) in program.ops.iter().enumerate() {
        state.step(index, op);
        if state.failed {
            say("// stopped: the oracle failed");
            break;
        }
    }
    state.finish(program.exit, program.ops.len() % 2 == 1);
}
