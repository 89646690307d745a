//! A fuzzed program: a list of [`Op`]s over a small arena of slots, its text form (one op per
//! line, what the corpus keeps and what a child process is given) and the generator.
//!
//! Slots are small numbers, taken modulo the arena's size for their kind when the op runs; an
//! op whose slot is empty does nothing (and says so in the trace). So removing an op while
//! shrinking never makes a later one invalid: it only finds an empty slot, or another handle.

use std::fmt::Write as _;

use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union};

/// A value of an op's field: written as one word of the text form, read back from it.
pub trait Code: Sized {
    /// Appends the value as one word.
    fn put(&self, out: &mut String);
    /// Reads the value from one word.
    fn get(word: &str) -> Result<Self, String>;
}

macro_rules! code_int {
    ($($t:ty),*) => {$(
        impl Code for $t {
            fn put(&self, out: &mut String) {
                let _ = write!(out, "{self}");
            }
            fn get(word: &str) -> Result<Self, String> {
                word.parse().map_err(|e| format!("{word:?}: {e}"))
            }
        }
    )*};
}
code_int!(u8, u32, u64, bool);

/// Declares a field enum of unit variants, with its text form and a uniform strategy.
macro_rules! code_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name { $($(#[$vmeta])* $variant),* }
        impl Code for $name {
            fn put(&self, out: &mut String) {
                out.push_str(match self { $($name::$variant => stringify!($variant)),* });
            }
            fn get(word: &str) -> Result<Self, String> {
                match word {
                    $(stringify!($variant) => Ok($name::$variant),)*
                    _ => Err(format!("{word:?} is not a {}", stringify!($name))),
                }
            }
        }
        #[allow(dead_code)]
        impl $name {
            /// Every variant, in order (the generator picks among them).
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            /// A uniform choice of a variant.
            pub fn any() -> BoxedStrategy<$name> {
                proptest::sample::select($name::ALL).boxed()
            }
        }
    };
}

code_enum!(
    /// What a program does when its ops are done.
    Ending {
        /// Drops every slot, clears the library's caches, returns: nothing may be left.
        Teardown,
        /// As `Teardown`, then `std::process::exit(0)` at once.
        TeardownExit,
        /// Exits with every slot still alive (leaks are the program's; violations still count).
        Live,
    }
);

code_enum!(
    /// The closure of a `ContextHandle::run`.
    RunBody {
        /// Returns `Ok`.
        Ok,
        /// Returns an `Err`.
        Err,
        /// Panics (the run resumes the panic: caught by the interpreter).
        Panic,
        /// Moves the bomb of slot `arg` in and panics: the bomb's record panics while the
        /// panic unwinds (F2).
        PanicHoldingBomb,
        /// Panics with the buffer of slot `arg` as the payload (`panic_any`).
        PanicWithHandle,
        /// Runs another context (slot `arg`) inside.
        Nested,
        /// Binds context `arg` to the thread (refused inside a run).
        Bind,
        /// Unbinds the thread's context (refused inside a run).
        Unbind,
        /// Makes an event in the current context and records it on the per-thread stream.
        WorkInCurrent,
        /// Drops the last handle of the buffer of slot `arg` inside the run.
        DropBuffer,
    }
);

code_enum!(
    /// The closure of a host function (`launch_host`, a graph host node).
    HostBody {
        /// Does nothing.
        Nothing,
        /// Panics (caught and reported by the library).
        Panic,
        /// Captures clones of the buffer of slot `arg` and the stream (kept alive until the
        /// host function has run; dropped on the disposal thread).
        Capture,
        /// Takes the buffer of slot `arg` (its last handle, if no other) and panics with it as
        /// the payload (F8).
        PanicWithHandle,
        /// Captures the bomb of slot `arg`, whose record panics when dropped.
        CaptureBomb,
        /// Sleeps 20 ms.
        Sleep,
        /// Captures clones of the buffer of slot `arg` and the stream in a value whose `Drop`
        /// takes 200 ms (the disposal thread is still dropping it when the program ends).
        CaptureSlow,
    }
);

code_enum!(
    /// The dynamic shared memory function of `potential_block_size`.
    PerBlock {
        /// `SharedPerBlock::Fixed(0)`.
        Fixed,
        /// A function that returns 64 bytes per warp.
        PerWarp,
        /// A function that unbinds the thread's context (F5).
        Unbind,
        /// A function that binds context slot `arg` to the thread (F5).
        Rebind,
        /// A function that panics (resumed after the driver call).
        Panic,
        /// A function that makes a stream in the current context and drops it.
        MakeStream,
        /// A function that clears the thread's primary-context cache.
        ClearCache,
    }
);

code_enum!(
    /// The closure of `ContextHandle::with_primary`.
    PrimaryBody {
        /// Synchronises the context.
        Sync,
        /// Clears the thread's primary-context cache (which `with_primary` borrows).
        ClearCache,
        /// Makes a stream in the context and drops it.
        Stream,
        /// Panics (propagates).
        Panic,
        /// Runs `with_primary` of the other device inside.
        Nested,
        /// Binds the context to the thread.
        Bind,
        /// Runs the context with `ContextHandle::run` inside.
        Run,
    }
);

code_enum!(
    /// A conditional node's kind.
    CondKind { If, IfElse, While, Switch }
);

code_enum!(
    /// Where a pool's memory is.
    PoolKind { Device, Host, HostNuma }
);

code_enum!(
    /// How managed memory is attached.
    AttachKind { Global, Host, Single }
);

code_enum!(
    /// A capture mode.
    Mode { Global, ThreadLocal, Relaxed }
);

code_enum!(
    /// What a capture records.
    CaptureBody {
        /// A memset of buffer `b`.
        Memset,
        /// A `fill_u32` launch on buffer `b`.
        Launch,
        /// A fork: memset in the branch, a launch on the main stream, a join.
        ForkJoin,
        /// A fork never joined (joined at the end by the guard).
        ForkNoJoin,
        /// Nested forks, joined in reverse.
        DeepFork,
        /// A copy from buffer `b` into itself at an offset.
        Copy,
        /// Returns an `Err` after a memset.
        Err,
        /// Panics after a memset (the guard ends the capture).
        Panic,
        /// A memset on stream slot `s`, outside the capture, while it runs.
        Outside,
        /// Drops the last handle of buffer `b` inside the capture.
        DropInside,
        /// Another capture inside this one.
        Nested,
    }
);

code_enum!(
    /// One of the fixed test kernels (`tests/kernels/test_kernels.ptx`).
    KernelSel { Fill, Add, Copy, AddOne, Spin }
);

code_enum!(
    /// What a host view does while it is open.
    ViewInner {
        /// Reads the bytes.
        Read,
        /// Writes the bytes (a mutable view).
        Write,
        /// Queues a memset on stream `s` while the view is open (refused).
        MemsetWhileOpen,
        /// Opens a second view of the same memory.
        SecondView,
    }
);

code_enum!(
    /// What a thread of the program does.
    ThreadJob {
        /// Drops the buffer of slot `a` (moved to the thread).
        DropBuffer,
        /// Drops the stream of slot `a` (moved to the thread).
        DropStream,
        /// Binds context `a` to the thread and exits with it bound (F10).
        BindAndExit,
        /// Queues memsets and a launch on stream `a` with buffer `b`, then synchronises.
        Work,
        /// Awaits the completion of event `a` (bounded).
        Await,
        /// Makes and drops a stream and event in context `a`, through the thread's caches.
        Churn,
        /// Runs context `a` with a panicking closure.
        RunPanic,
    }
);

code_enum!(
    /// A kernel attribute query.
    AttrSel { Get, SetShared }
);

/// Declares [`Op`] with its text form (the name, then each field as a word) and its line of
/// Rust for the trace's header.
macro_rules! ops {
    ($($(#[$meta:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? }),* $(,)?) => {
        /// One operation of a fuzzed program. Slot fields are taken modulo the arena's size.
        #[derive(Clone, Debug, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub enum Op { $($(#[$meta])* $name { $($field: $ty),* }),* }

        impl Op {
            /// The op's name (its variant).
            pub fn name(&self) -> &'static str {
                match self {
                    $(Op::$name { .. } => stringify!($name),)*
                }
            }

            /// The op's text form: its name, then `field=value` words.
            pub fn encode(&self) -> String {
                match self {
                    $(Op::$name { $($field),* } => {
                        #[allow(unused_mut)]
                        let mut out = String::from(stringify!($name));
                        $(
                            out.push(' ');
                            out.push_str(stringify!($field));
                            out.push('=');
                            Code::put($field, &mut out);
                        )*
                        out
                    })*
                }
            }

            /// Reads an op from its text form.
            pub fn decode(line: &str) -> Result<Op, String> {
                let mut words = line.split_whitespace();
                let name = words.next().ok_or("an empty line")?;
                #[allow(unused_mut)]
                let mut fields: std::collections::HashMap<&str, &str> = words
                    .map(|word| word.split_once('=').ok_or(format!("{word:?} is not field=value")))
                    .collect::<Result<_, _>>()?;
                let op = match name {
                    $(stringify!($name) => Op::$name {
                        $($field: {
                            let word = fields
                                .remove(stringify!($field))
                                .ok_or(format!("{name}: no {}", stringify!($field)))?;
                            <$ty as Code>::get(word)?
                        }),*
                    },)*
                    _ => return Err(format!("no op {name:?}")),
                };
                if let Some(extra) = fields.keys().next() {
                    return Err(format!("{name}: unknown field {extra}"));
                }
                Ok(op)
            }
        }
    };
}

ops! {
    // Contexts.
    Primary { c: u8, dev: u8 },
    Green { c: u8, dev: u8, sms: u32 },
    Bind { c: u8 },
    Unbind {},
    Current { c: u8 },
    CtxSync { c: u8 },
    MemInfo { c: u8 },
    Run { c: u8, body: RunBody, arg: u8 },
    ClearPrimaryCache {},
    WithPrimary { dev: u8, body: PrimaryBody },
    FlushDisposals {},
    CudarcRelease { dev: u8 },
    FromCudarc { c: u8, dev: u8 },
    ToCudarc { c: u8 },
    DropCtx { c: u8 },
    // Streams.
    StreamNew { s: u8, c: u8, nonblocking: bool, prio: u8 },
    GreenStream { s: u8, c: u8 },
    Legacy { s: u8 },
    PerThread { s: u8 },
    LegacyIn { s: u8, c: u8 },
    StreamRecycler { r: u8, c: u8 },
    AcquireStream { s: u8, r: u8 },
    StreamSync { s: u8 },
    StreamQuery { s: u8 },
    WaitEvent { s: u8, e: u8 },
    DropStream { s: u8 },
    // Events and completions.
    EventNew { e: u8, c: u8, timing: bool, blocking: bool },
    EventInCurrent { e: u8 },
    EventRecycler { r: u8, c: u8 },
    AcquireEvent { e: u8, r: u8 },
    Record { e: u8, s: u8 },
    EventQuery { e: u8 },
    EventSync { e: u8 },
    Elapsed { e: u8, e2: u8 },
    IpcEvent { e: u8, e2: u8, c: u8 },
    HeldEvent { e: u8, s: u8, g: u8 },
    DropEvent { e: u8 },
    Completed { k: u8, e: u8 },
    CompletedMany { e: u8, n: u8 },
    Await { k: u8, open: u8 },
    Poll { k: u8 },
    PollPanickingWaker { k: u8 },
    DropCompletion { k: u8 },
    // Gates and host functions.
    Hold { s: u8, g: u8 },
    Open { g: u8 },
    LaunchHost { s: u8, body: HostBody, arg: u8 },
    // Pools.
    PoolNew { p: u8, kind: PoolKind, dev: u8, ipc: bool },
    PoolDefault { p: u8, dev: u8 },
    PoolCurrent { p: u8, dev: u8 },
    SetCurrent { p: u8, dev: u8 },
    PeerAccess { p: u8, dev: u8, on: bool },
    RevokePeers { p: u8 },
    PoolTune { p: u8, threshold: u64 },
    DropPool { p: u8 },
    // Memory.
    AllocPool { b: u8, p: u8, s: u8, size: u32 },
    AllocAsync { b: u8, s: u8, size: u32 },
    Alloc { b: u8, c: u8, size: u32 },
    AllocHost { b: u8, c: u8, size: u32 },
    AllocManaged { b: u8, c: u8, size: u32, attach: AttachKind },
    View { b: u8, src: u8, off: u32, len: u32 },
    Memset { b: u8, s: u8, off: u32, len: u32, val: u8 },
    CopyAsync { src: u8, dst: u8, s: u8, len: u32 },
    FromHost { b: u8, s: u8, len: u32 },
    ToHost { b: u8, s: u8 },
    Batch { s: u8, a: u8, b: u8, c: u8, len: u32 },
    SetDealloc { b: u8, s: u8 },
    RecordUse { b: u8, s: u8 },
    HostView { b: u8, s: u8, inner: ViewInner },
    Prefetch { b: u8, s: u8, dev: u8 },
    Advise { b: u8, dev: u8 },
    AttachMem { b: u8, s: u8, how: AttachKind },
    Typed { b: u8, s: u8 },
    IpcRoundTrip { b: u8, src: u8, s: u8, dev: u8 },
    Vmm { b: u8, dev: u8, chunks: u8, access: u8, export: bool },
    Growable { b: u8, dev: u8, grow: u32 },
    CudarcSlice { b: u8, dev: u8, n: u32 },
    DropBuf { b: u8 },
    // Kernels.
    Launch { k: KernelSel, b: u8, b2: u8, s: u8, n: u32, block: u32 },
    LaunchEx { b: u8, s: u8, n: u32, cluster: u8, coop: bool, programmatic: bool, event: u8 },
    BlockSize { c: u8, action: PerBlock, arg: u8 },
    Occupancy { c: u8, block: u32 },
    KernelAttr { dev: u8, which: AttrSel },
    TensorMap { b: u8, im2col: bool },
    PanickingBounds { b: u8, s: u8 },
    DropLibrary {},
    // Graphs.
    GraphNew { g: u8, c: u8 },
    Capture { g: u8, c: u8, mode: Mode, body: CaptureBody, b: u8, s: u8 },
    NodeKernel { g: u8, b: u8, n: u32, dep: u8 },
    NodeMemset { g: u8, b: u8, dep: u8 },
    NodeCopy { g: u8, b: u8, b2: u8, dep: u8 },
    NodeEventRecord { g: u8, e: u8, dep: u8 },
    NodeEventWait { g: u8, e: u8, dep: u8 },
    NodeEmpty { g: u8, dep: u8 },
    NodeHost { g: u8, body: HostBody, arg: u8, dep: u8 },
    NodeChild { g: u8, child: u8, dep: u8 },
    NodeMemAlloc { g: u8, b: u8, size: u32, dep: u8 },
    NodeMemFree { g: u8, b: u8, dep: u8 },
    CondCreate { h: u8, g: u8, default: u8 },
    CondNode { g: u8, h: u8, kind: CondKind, n: u32, dep: u8, body: u8 },
    NodeSetCond { g: u8, h: u8, b: u8, dep: u8 },
    Instantiate { x: u8, g: u8 },
    ExecLaunch { x: u8, s: u8 },
    ExecUpdate { x: u8, g: u8 },
    ExecSetMemset { x: u8, node: u8, b: u8 },
    ExecEnable { x: u8, node: u8, on: bool },
    ExecSetKernel { x: u8, node: u8, b: u8, n: u32 },
    ExecSetCopy { x: u8, node: u8, b: u8, b2: u8 },
    DropGraph { g: u8 },
    DropExec { x: u8 },
    // Threads and records that panic.
    Thread { t: u8, job: ThreadJob, a: u8, b: u8 },
    Join { t: u8 },
    Bomb { k: u8, armed: bool, owns: u8, chain: u8 },
    DropBomb { k: u8 },
}

/// A whole program: the devices it runs with, its ops, and how it ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// Simulated devices (1 or 2).
    pub devices: u8,
    /// How the program ends.
    pub exit: Ending,
    /// The ops, in order.
    pub ops: Vec<Op>,
}

impl Program {
    /// The text form: a header line, then one op per line.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = write!(out, "devices={} exit=", self.devices);
        self.exit.put(&mut out);
        out.push('\n');
        for op in &self.ops {
            out.push_str(&op.encode());
            out.push('\n');
        }
        out
    }

    /// Reads the text form; `#` starts a comment line, blank lines are skipped.
    pub fn decode(text: &str) -> Result<Program, String> {
        let mut lines = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'));
        let header = lines.next().ok_or("an empty program")?;
        let (mut devices, mut exit) = (None, None);
        for word in header.split_whitespace() {
            match word.split_once('=') {
                Some(("devices", value)) => devices = Some(u8::get(value)?),
                Some(("exit", value)) => exit = Some(Ending::get(value)?),
                _ => return Err(format!("header: {word:?}")),
            }
        }
        let ops = lines.map(Op::decode).collect::<Result<_, _>>()?;
        Ok(Program {
            devices: devices.ok_or("header: no devices")?,
            exit: exit.ok_or("header: no exit")?,
            ops,
        })
    }
}

// The generator.

fn slot() -> BoxedStrategy<u8> {
    // Three values: slots collide often, so ops meet each other's handles.
    (0u8..3).boxed()
}

fn dev() -> BoxedStrategy<u8> {
    prop_oneof![4 => Just(0u8), 1 => Just(1u8)].boxed()
}

fn size() -> BoxedStrategy<u32> {
    prop_oneof![
        6 => Just(4096u32),
        3 => Just(256u32),
        2 => Just(1u32 << 20),
        1 => Just(64u32),
        1 => Just(0u32),
        1 => Just(6u32),
        1 => 1u32..100_000,
    ]
    .boxed()
}

fn len() -> BoxedStrategy<u32> {
    prop_oneof![
        4 => Just(64u32),
        2 => Just(4096u32),
        2 => Just(0u32),
        1 => Just(1u32 << 20),
        1 => 1u32..10_000,
    ]
    .boxed()
}

fn elements() -> BoxedStrategy<u32> {
    prop_oneof![4 => Just(16u32), 2 => Just(1024u32), 1 => Just(0u32), 1 => Just(1u32 << 20)]
        .boxed()
}

fn dep() -> BoxedStrategy<u8> {
    prop_oneof![2 => Just(0u8), 3 => 1u8..4].boxed()
}

fn switch_count() -> BoxedStrategy<u32> {
    // Around the library's cap of 65536 bodies, and far beyond it (never a huge count that a
    // driver without a cap could still allocate: a reverted cap must fail fast, not swap).
    prop_oneof![
        4 => 0u32..5,
        2 => Just(u32::MAX),
        1 => Just(1u32 << 16),
        1 => Just((1u32 << 16) + 1),
        1 => Just(100_000u32),
    ]
    .boxed()
}

fn host_body() -> BoxedStrategy<HostBody> {
    HostBody::any()
}

macro_rules! weighted {
    ($($weight:expr => $strategy:expr),* $(,)?) => {
        Union::new_weighted(vec![$(($weight, $strategy.boxed())),*]).boxed()
    };
}

/// One op, any kind, with weights that keep slots mostly full.
pub fn op() -> BoxedStrategy<Op> {
    use Op::*;
    let contexts = weighted![
        6 => (slot(), dev()).prop_map(|(c, dev)| Primary { c, dev }),
        3 => (slot(), dev(), prop::sample::select(vec![1u32, 8, 16, 32, 0, 100_000]))
            .prop_map(|(c, dev, sms)| Green { c, dev, sms }),
        2 => slot().prop_map(|c| Bind { c }),
        1 => Just(Unbind {}),
        1 => slot().prop_map(|c| Current { c }),
        1 => slot().prop_map(|c| CtxSync { c }),
        1 => slot().prop_map(|c| MemInfo { c }),
        3 => (slot(), RunBody::any(), slot()).prop_map(|(c, body, arg)| Run { c, body, arg }),
        1 => Just(ClearPrimaryCache {}),
        2 => (dev(), PrimaryBody::any()).prop_map(|(dev, body)| WithPrimary { dev, body }),
        1 => Just(FlushDisposals {}),
        1 => dev().prop_map(|dev| CudarcRelease { dev }),
        1 => (slot(), dev()).prop_map(|(c, dev)| FromCudarc { c, dev }),
        1 => slot().prop_map(|c| ToCudarc { c }),
        2 => slot().prop_map(|c| DropCtx { c }),
    ];
    let streams = weighted![
        6 => (slot(), slot(), any::<bool>(), 0u8..3)
            .prop_map(|(s, c, nonblocking, prio)| StreamNew { s, c, nonblocking, prio }),
        2 => (slot(), slot()).prop_map(|(s, c)| GreenStream { s, c }),
        1 => slot().prop_map(|s| Legacy { s }),
        1 => slot().prop_map(|s| PerThread { s }),
        1 => (slot(), slot()).prop_map(|(s, c)| LegacyIn { s, c }),
        1 => (slot(), slot()).prop_map(|(r, c)| StreamRecycler { r, c }),
        2 => (slot(), slot()).prop_map(|(s, r)| AcquireStream { s, r }),
        2 => slot().prop_map(|s| StreamSync { s }),
        1 => slot().prop_map(|s| StreamQuery { s }),
        2 => (slot(), slot()).prop_map(|(s, e)| WaitEvent { s, e }),
        2 => slot().prop_map(|s| DropStream { s }),
    ];
    let events = weighted![
        4 => (slot(), slot(), any::<bool>(), any::<bool>())
            .prop_map(|(e, c, timing, blocking)| EventNew { e, c, timing, blocking }),
        1 => slot().prop_map(|e| EventInCurrent { e }),
        1 => (slot(), slot()).prop_map(|(r, c)| EventRecycler { r, c }),
        1 => (slot(), slot()).prop_map(|(e, r)| AcquireEvent { e, r }),
        4 => (slot(), slot()).prop_map(|(e, s)| Record { e, s }),
        1 => slot().prop_map(|e| EventQuery { e }),
        1 => slot().prop_map(|e| EventSync { e }),
        1 => (slot(), slot()).prop_map(|(e, e2)| Elapsed { e, e2 }),
        1 => (slot(), slot(), slot()).prop_map(|(e, e2, c)| IpcEvent { e, e2, c }),
        2 => (slot(), slot(), slot()).prop_map(|(e, s, g)| HeldEvent { e, s, g }),
        2 => slot().prop_map(|e| DropEvent { e }),
        3 => (slot(), slot()).prop_map(|(k, e)| Completed { k, e }),
        1 => (slot(), prop_oneof![Just(4u8), Just(17u8), Just(24u8)])
            .prop_map(|(e, n)| CompletedMany { e, n }),
        2 => (slot(), 0u8..3).prop_map(|(k, open)| Await { k, open }),
        1 => slot().prop_map(|k| Poll { k }),
        1 => slot().prop_map(|k| PollPanickingWaker { k }),
        1 => slot().prop_map(|k| DropCompletion { k }),
        2 => (slot(), slot()).prop_map(|(s, g)| Hold { s, g }),
        2 => slot().prop_map(|g| Open { g }),
        4 => (slot(), host_body(), slot()).prop_map(|(s, body, arg)| LaunchHost { s, body, arg }),
    ];
    let pools = weighted![
        4 => (slot(), PoolKind::any(), dev(), any::<bool>())
            .prop_map(|(p, kind, dev, ipc)| PoolNew { p, kind, dev, ipc }),
        1 => (slot(), dev()).prop_map(|(p, dev)| PoolDefault { p, dev }),
        1 => (slot(), dev()).prop_map(|(p, dev)| PoolCurrent { p, dev }),
        1 => (slot(), dev()).prop_map(|(p, dev)| SetCurrent { p, dev }),
        2 => (slot(), dev(), any::<bool>()).prop_map(|(p, dev, on)| PeerAccess { p, dev, on }),
        1 => slot().prop_map(|p| RevokePeers { p }),
        1 => (slot(), prop_oneof![Just(0u64), Just(u64::MAX), Just(1u64 << 20)])
            .prop_map(|(p, threshold)| PoolTune { p, threshold }),
        1 => slot().prop_map(|p| DropPool { p }),
    ];
    let memory = weighted![
        4 => (slot(), slot(), slot(), size()).prop_map(|(b, p, s, size)| AllocPool { b, p, s, size }),
        4 => (slot(), slot(), size()).prop_map(|(b, s, size)| AllocAsync { b, s, size }),
        3 => (slot(), slot(), size()).prop_map(|(b, c, size)| Alloc { b, c, size }),
        2 => (slot(), slot(), size()).prop_map(|(b, c, size)| AllocHost { b, c, size }),
        2 => (slot(), slot(), size(), AttachKind::any())
            .prop_map(|(b, c, size, attach)| AllocManaged { b, c, size, attach }),
        2 => (slot(), slot(), len(), len()).prop_map(|(b, src, off, len)| View { b, src, off, len }),
        4 => (slot(), slot(), len(), len(), any::<u8>())
            .prop_map(|(b, s, off, len, val)| Memset { b, s, off, len, val }),
        3 => (slot(), slot(), slot(), len()).prop_map(|(src, dst, s, len)| CopyAsync { src, dst, s, len }),
        2 => (slot(), slot(), len()).prop_map(|(b, s, len)| FromHost { b, s, len }),
        2 => (slot(), slot()).prop_map(|(b, s)| ToHost { b, s }),
        1 => (slot(), slot(), slot(), slot(), len()).prop_map(|(s, a, b, c, len)| Batch { s, a, b, c, len }),
        1 => (slot(), slot()).prop_map(|(b, s)| SetDealloc { b, s }),
        1 => (slot(), slot()).prop_map(|(b, s)| RecordUse { b, s }),
        3 => (slot(), slot(), ViewInner::any()).prop_map(|(b, s, inner)| HostView { b, s, inner }),
        1 => (slot(), slot(), prop_oneof![Just(0u8), Just(1), Just(255)])
            .prop_map(|(b, s, dev)| Prefetch { b, s, dev }),
        1 => (slot(), any::<u8>()).prop_map(|(b, dev)| Advise { b, dev }),
        1 => (slot(), slot(), AttachKind::any()).prop_map(|(b, s, how)| AttachMem { b, s, how }),
        1 => (slot(), slot()).prop_map(|(b, s)| Typed { b, s }),
        2 => (slot(), slot(), slot(), dev()).prop_map(|(b, src, s, dev)| IpcRoundTrip { b, src, s, dev }),
        2 => (slot(), dev(), 1u8..4, 0u8..3, any::<bool>())
            .prop_map(|(b, dev, chunks, access, export)| Vmm { b, dev, chunks, access, export }),
        1 => (slot(), dev(), prop_oneof![Just(0u32), Just(4096), Just(3 << 20)])
            .prop_map(|(b, dev, grow)| Growable { b, dev, grow }),
        1 => (slot(), dev(), prop_oneof![Just(16u32), Just(0), Just(1024)])
            .prop_map(|(b, dev, n)| CudarcSlice { b, dev, n }),
        3 => slot().prop_map(|b| DropBuf { b }),
    ];
    let kernels = weighted![
        5 => (KernelSel::any(), slot(), slot(), slot(), elements(), prop_oneof![Just(128u32), Just(1u32), Just(2048u32)])
            .prop_map(|(k, b, b2, s, n, block)| Launch { k, b, b2, s, n, block }),
        1 => (slot(), slot(), elements(), 0u8..4, any::<bool>(), any::<bool>(), prop_oneof![Just(255u8), slot()])
            .prop_map(|(b, s, n, cluster, coop, programmatic, event)| LaunchEx { b, s, n, cluster, coop, programmatic, event }),
        2 => (slot(), PerBlock::any(), slot()).prop_map(|(c, action, arg)| BlockSize { c, action, arg }),
        1 => (slot(), prop_oneof![Just(128u32), Just(0u32), Just(4096u32)]).prop_map(|(c, block)| Occupancy { c, block }),
        1 => (dev(), AttrSel::any()).prop_map(|(dev, which)| KernelAttr { dev, which }),
        2 => (slot(), any::<bool>()).prop_map(|(b, im2col)| TensorMap { b, im2col }),
        1 => (slot(), slot()).prop_map(|(b, s)| PanickingBounds { b, s }),
        1 => Just(DropLibrary {}),
    ];
    let graphs = weighted![
        4 => (slot(), slot()).prop_map(|(g, c)| GraphNew { g, c }),
        3 => (slot(), slot(), Mode::any(), CaptureBody::any(), slot(), slot())
            .prop_map(|(g, c, mode, body, b, s)| Capture { g, c, mode, body, b, s }),
        3 => (slot(), slot(), elements(), dep()).prop_map(|(g, b, n, dep)| NodeKernel { g, b, n, dep }),
        2 => (slot(), slot(), dep()).prop_map(|(g, b, dep)| NodeMemset { g, b, dep }),
        1 => (slot(), slot(), slot(), dep()).prop_map(|(g, b, b2, dep)| NodeCopy { g, b, b2, dep }),
        1 => (slot(), slot(), dep()).prop_map(|(g, e, dep)| NodeEventRecord { g, e, dep }),
        1 => (slot(), slot(), dep()).prop_map(|(g, e, dep)| NodeEventWait { g, e, dep }),
        1 => (slot(), dep()).prop_map(|(g, dep)| NodeEmpty { g, dep }),
        2 => (slot(), host_body(), slot(), dep()).prop_map(|(g, body, arg, dep)| NodeHost { g, body, arg, dep }),
        1 => (slot(), slot(), dep()).prop_map(|(g, child, dep)| NodeChild { g, child, dep }),
        1 => (slot(), slot(), size(), dep()).prop_map(|(g, b, size, dep)| NodeMemAlloc { g, b, size, dep }),
        1 => (slot(), slot(), dep()).prop_map(|(g, b, dep)| NodeMemFree { g, b, dep }),
        2 => (slot(), slot(), prop_oneof![Just(0u8), Just(1), Just(2)]).prop_map(|(h, g, default)| CondCreate { h, g, default }),
        2 => (slot(), slot(), CondKind::any(), switch_count(), dep(), prop_oneof![Just(255u8), slot()])
            .prop_map(|(g, h, kind, n, dep, body)| CondNode { g, h, kind, n, dep, body }),
        1 => (slot(), slot(), slot(), dep()).prop_map(|(g, h, b, dep)| NodeSetCond { g, h, b, dep }),
        4 => (slot(), slot()).prop_map(|(x, g)| Instantiate { x, g }),
        4 => (slot(), slot()).prop_map(|(x, s)| ExecLaunch { x, s }),
        1 => (slot(), slot()).prop_map(|(x, g)| ExecUpdate { x, g }),
        1 => (slot(), dep(), slot()).prop_map(|(x, node, b)| ExecSetMemset { x, node, b }),
        1 => (slot(), dep(), any::<bool>()).prop_map(|(x, node, on)| ExecEnable { x, node, on }),
        1 => (slot(), dep(), slot(), elements()).prop_map(|(x, node, b, n)| ExecSetKernel { x, node, b, n }),
        1 => (slot(), dep(), slot(), slot()).prop_map(|(x, node, b, b2)| ExecSetCopy { x, node, b, b2 }),
        1 => slot().prop_map(|g| DropGraph { g }),
        1 => slot().prop_map(|x| DropExec { x }),
    ];
    let others = weighted![
        3 => (0u8..2, ThreadJob::any(), slot(), slot()).prop_map(|(t, job, a, b)| Thread { t, job, a, b }),
        2 => (0u8..2).prop_map(|t| Join { t }),
        2 => (slot(), any::<bool>(), prop_oneof![Just(255u8), slot()], prop_oneof![Just(255u8), slot()])
            .prop_map(|(k, armed, owns, chain)| Bomb { k, armed, owns, chain }),
        1 => slot().prop_map(|k| DropBomb { k }),
    ];
    weighted![
        12 => contexts,
        11 => streams,
        16 => events,
        6 => pools,
        20 => memory,
        8 => kernels,
        18 => graphs,
        5 => others,
    ]
}

/// Short sequences that real programs write, with their slots wired together. Each is also a
/// targeted combination for one rule of the library (named in its comment); the ops are the
/// same ops as anywhere else, and shrink as they do.
fn idiom() -> BoxedStrategy<Vec<Op>> {
    use Op::*;
    weighted![
        // A stream with memory, used and synchronised.
        3 => (slot(), slot(), slot(), size()).prop_map(|(c, s, b, size)| vec![
            Primary { c, dev: 0 },
            StreamNew { s, c, nonblocking: true, prio: 0 },
            AllocAsync { b, s, size },
            Memset { b, s, off: 0, len: 64, val: 1 },
        ]),
        // A host function that captures memory or panics with it (F8).
        2 => (slot(), slot(), host_body(), any::<bool>()).prop_map(|(s, b, body, sync)| {
            let mut ops = vec![
                StreamNew { s, c: 0, nonblocking: true, prio: 0 },
                AllocAsync { b, s, size: 4096 },
                LaunchHost { s, body, arg: b },
                DropBuf { b },
            ];
            if sync {
                ops.push(StreamSync { s });
            }
            ops
        }),
        // Many pending completions held back by a host function, then a later one awaited
        // (F6).
        2 => (slot(), slot(), 0u8..2, prop_oneof![Just(16u8), Just(17u8), Just(20u8)]).prop_map(
            |(s, e, g, n)| {
                let (s2, e2, g2, k) = ((s + 1) % 3, (e + 1) % 3, 1 - g, e);
                vec![
                    StreamNew { s, c: 0, nonblocking: true, prio: 0 },
                    HeldEvent { e, s, g },
                    CompletedMany { e, n },
                    StreamNew { s: s2, c: 0, nonblocking: true, prio: 0 },
                    HeldEvent { e: e2, s: s2, g: g2 },
                    Completed { k, e: e2 },
                    Await { k, open: g2 + 1 },
                ]
            }
        ),
        // A green context bound to the thread, its handle dropped, then an occupancy question
        // whose shared-memory function changes the binding (F5).
        2 => (slot(), prop_oneof![Just(PerBlock::Unbind), Just(PerBlock::Rebind), Just(PerBlock::Panic)], slot(), slot())
            .prop_map(|(c, action, arg, other)| vec![
                Green { c, dev: 0, sms: 8 },
                Bind { c },
                DropCtx { c },
                Primary { c: other, dev: 0 },
                BlockSize { c: other, action, arg },
            ]),
        // A conditional handle with or without a default, its node, launched (F7, F12).
        2 => (slot(), slot(), slot(), CondKind::any(), switch_count(), 0u8..2, any::<bool>())
            .prop_map(|(g, h, x, kind, n, default, set)| {
                let mut ops = vec![
                    GraphNew { g, c: 0 },
                    CondCreate { h, g, default },
                    CondNode { g, h, kind, n, dep: 0, body: 255 },
                ];
                if set {
                    ops.push(NodeSetCond { g, h, b: 0, dep: 0 });
                }
                ops.extend([Instantiate { x, g }, ExecLaunch { x, s: 0 }]);
                ops
            }),
        // A panic that unwinds past the last handle of a record whose Drop panics (F2), or
        // drops a chain of records that may panic as they are released (N4).
        2 => (slot(), slot(), any::<bool>()).prop_map(|(k, c, owns)| vec![
            Bomb { k, armed: true, owns: if owns { 0 } else { 255 }, chain: 255 },
            Primary { c, dev: 0 },
            Run { c, body: RunBody::PanicHoldingBomb, arg: k },
        ]),
        1 => (slot(), prop::collection::vec(any::<bool>(), 1..4), any::<bool>())
            .prop_map(|(k, armed, unwinding)| {
                let mut ops = vec![Bomb { k, armed: true, owns: 255, chain: 255 }];
                ops.extend(armed.into_iter().map(|armed| Bomb { k, armed, owns: 255, chain: k }));
                ops.push(if unwinding {
                    Run { c: 0, body: RunBody::PanicHoldingBomb, arg: k }
                } else {
                    DropBomb { k }
                });
                ops
            }),
        // cudarc code ran and released its primary context but left it current, then a tensor
        // map or a kernel attribute (F9). Memory of a green context, or of another device's
        // primary context, keeps no retain of that one.
        2 => (slot(), slot(), any::<bool>(), any::<bool>()).prop_map(|(c, b, tensor, green)| {
            let mut ops = if green {
                vec![Green { c, dev: 0, sms: 8 }, Alloc { b, c, size: 4096 }, DropCtx { c }]
            } else {
                Vec::new()
            };
            ops.extend([ClearPrimaryCache {}, CudarcRelease { dev: if green { 0 } else { 1 } }]);
            ops.push(if tensor {
                TensorMap { b, im2col: false }
            } else {
                KernelAttr { dev: 0, which: AttrSel::Get }
            });
            ops
        }),
        // Work whose host function captures handles, synchronised, then the end (F10).
        2 => (slot(), slot(), any::<bool>()).prop_map(|(s, b, green)| {
            let mut ops = Vec::new();
            if green {
                ops.extend([Green { c: 1, dev: 0, sms: 8 }, Thread { t: 0, job: ThreadJob::BindAndExit, a: 1, b: 0 }, DropCtx { c: 1 }, Join { t: 0 }]);
            } else {
                ops.extend([
                    StreamNew { s, c: 0, nonblocking: true, prio: 0 },
                    AllocAsync { b, s, size: 4096 },
                    LaunchHost { s, body: HostBody::Capture, arg: b },
                    DropBuf { b },
                    StreamSync { s },
                ]);
            }
            ops
        }),
        // A graph built node by node and replayed on another stream.
        3 => (slot(), slot(), slot(), slot()).prop_map(|(g, b, x, s)| vec![
            GraphNew { g, c: 0 },
            Alloc { b, c: 0, size: 4096 },
            NodeKernel { g, b, n: 16, dep: 0 },
            NodeMemset { g, b, dep: 1 },
            Instantiate { x, g },
            StreamNew { s, c: 0, nonblocking: false, prio: 0 },
            ExecLaunch { x, s },
        ]),
    ]
}

/// What most programs begin with: a context, a stream and memory in it, each usually there
/// (ordinary ops: shrinking removes them like any other).
fn prelude() -> BoxedStrategy<Vec<Op>> {
    use Op::*;
    (
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.75),
        prop::bool::weighted(0.6),
        prop::bool::weighted(0.25),
        any::<bool>(),
    )
        .prop_map(|(context, stream, memory, graph, nonblocking)| {
            let mut ops = Vec::new();
            if context {
                ops.push(Primary { c: 0, dev: 0 });
            }
            if stream {
                ops.push(StreamNew {
                    s: 0,
                    c: 0,
                    nonblocking,
                    prio: 0,
                });
            }
            if memory {
                ops.push(AllocAsync {
                    b: 0,
                    s: 0,
                    size: 4096,
                });
            }
            if graph {
                ops.push(GraphNew { g: 0, c: 0 });
            }
            ops
        })
        .boxed()
}

/// A program of a prelude and up to `max_groups` groups (single ops and idioms).
pub fn program(max_groups: usize) -> BoxedStrategy<Program> {
    let group = weighted![
        8 => op().prop_map(|op| vec![op]),
        1 => idiom(),
    ];
    (
        prop_oneof![3 => Just(1u8), 1 => Just(2u8)],
        prop_oneof![6 => Just(Ending::Teardown), 2 => Just(Ending::TeardownExit), 1 => Just(Ending::Live)],
        prelude(),
        prop::collection::vec(group, 1..=max_groups),
    )
        .prop_map(|(devices, exit, prelude, groups)| Program {
            devices,
            exit,
            ops: prelude.into_iter().chain(groups.into_iter().flatten()).collect(),
        })
        .boxed()
}
