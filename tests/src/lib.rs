//! Shared fixtures for the downstream-usage tests: resources whose deleters record what they do,
//! so tests can assert exactly-once deletion and its order.
#![deny(missing_docs)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use handles_core::ResourceHandle;

/// The README's code blocks, compiled and run as doctests.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// One thing a recording deleter did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A node was deleted.
    DeleteNode(u64),
    /// A leaf was deleted.
    DeleteLeaf(u64),
}

static LOG: Mutex<Vec<Event>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static SERIAL: Mutex<()> = Mutex::new(());

/// Appends to the shared log.
pub fn record(event: Event) {
    LOG.lock().unwrap_or_else(|e| e.into_inner()).push(event);
}

/// The events of the shared log that concern `ids`, in order.
pub fn events_for(ids: &[u64]) -> Vec<Event> {
    LOG.lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .copied()
        .filter(|event| match event {
            Event::DeleteNode(id) | Event::DeleteLeaf(id) => ids.contains(id),
        })
        .collect()
}

/// Empties the shared log (for tests that own their whole binary, to keep lookups short).
pub fn clear_log() {
    LOG.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// A fresh raw id, never handed out before in this process.
pub fn fresh_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Serialises tests that read live counts or replace the report hook, which are process-wide.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a recording deleter was told to fail.
#[derive(Debug)]
pub struct Refused(pub u64);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused to delete {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// What a node's deleter does besides recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Behaviour {
    /// Succeeds.
    #[default]
    Succeed,
    /// Returns `Err(Refused)`.
    Fail,
    /// Panics.
    Panic,
}

fn delete_node(raw: u64, node: &Node) -> Result<(), Refused> {
    // The parent must still be alive while its child is deleted.
    if let Some(parent) = &node.parent {
        assert!(parent.strong_count() >= 1);
        assert!(
            !events_for(&[parent.id()]).contains(&Event::DeleteNode(parent.id())),
            "parent deleted before its child"
        );
    }
    record(Event::DeleteNode(raw));
    match node.behaviour {
        Behaviour::Succeed => Ok(()),
        Behaviour::Fail => Err(Refused(raw)),
        Behaviour::Panic => panic!("deleter of node {raw} panicked"),
    }
}

/// Runs `body` on a new thread with a 2 MiB stack (what a deep release must fit in) and returns
/// what it returned; a panic or a stack overflow there fails the caller with `what`.
pub fn on_a_2_mib_thread<T: Send + 'static>(
    what: &str,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(body)
        .expect("a thread")
        .join()
        .expect(what)
}

/// Links deleted so far in this process (see [`Link`]).
pub static LINKS_DELETED: AtomicU64 = AtomicU64::new(0);

fn delete_link(_: u64, link: &Link) -> Result<(), std::io::Error> {
    // Deleted before its owner: the parent is still alive.
    if let Some(parent) = &link.parent {
        assert!(parent.strong_count() >= 1);
    }
    LINKS_DELETED.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A list node that owns the node before it, as trees and lists of handles do; its deleter
/// only counts ([`LINKS_DELETED`]) and checks that its parent is still alive.
#[derive(ResourceHandle)]
#[handle(raw = u64, delete = delete_link)]
pub struct Link {
    /// The link before this one.
    #[owner]
    pub parent: Option<LinkHandle>,
}

// SAFETY: a plain id; nothing is done with it from any thread.
unsafe impl handles_core::ThreadSafe for Link {}

/// A chain of `depth` links with ids from `first_id`, each owning the one before: the last.
pub fn link_chain(depth: usize, first_id: u64) -> Option<LinkHandle> {
    let mut tail: Option<LinkHandle> = None;
    for id in first_id..first_id + depth as u64 {
        // SAFETY: stand-in ids that nothing else owns; the deleter only counts.
        tail = Some(unsafe { LinkHandle::from_raw(id, Link { parent: tail }) });
    }
    tail
}

/// A node in a tree of resources: optionally owned by a parent node of the same type.
#[derive(ResourceHandle)]
#[handle(raw = u64, accessor = id, delete = delete_node, registry)]
pub struct Node {
    /// The node this one depends on.
    #[owner]
    pub parent: Option<NodeHandle>,
    /// What the deleter does.
    pub behaviour: Behaviour,
}
// SAFETY: the raw value is plain data that any thread may use and delete.
unsafe impl handles_core::ThreadSafe for Node {}

impl NodeHandle {
    /// A new owning node with a fresh id.
    pub fn create(parent: Option<NodeHandle>) -> NodeHandle {
        Self::create_with(parent, Behaviour::Succeed)
    }

    /// A new owning node whose deleter behaves as told.
    pub fn create_with(parent: Option<NodeHandle>, behaviour: Behaviour) -> NodeHandle {
        // SAFETY: the id is fresh, so nothing else owns it, and `delete_node` is its deleter.
        unsafe { NodeHandle::from_raw(fresh_id(), Node { parent, behaviour }) }
    }
}

fn delete_leaf(raw: u64, _: &Leaf) -> Result<(), Refused> {
    record(Event::DeleteLeaf(raw));
    Ok(())
}

/// A leaf that depends on a node.
#[derive(ResourceHandle)]
#[handle(raw = u64, delete = delete_leaf)]
pub struct Leaf {
    /// The node this leaf needs.
    #[owner]
    pub node: NodeHandle,
    /// A label fixed at creation.
    pub label: &'static str,
}
// SAFETY: the raw value is plain data that any thread may use and delete.
unsafe impl handles_core::ThreadSafe for Leaf {}

impl LeafHandle {
    /// A new owning leaf under `node`.
    pub fn create(node: NodeHandle, label: &'static str) -> LeafHandle {
        // SAFETY: the id is fresh and `delete_leaf` is its deleter.
        unsafe { LeafHandle::from_raw(fresh_id(), Leaf { node, label }) }
    }
}

/// Collects every deleter failure reported while it lives (as `"Type 0xraw: error"`), and
/// restores the default report hook when dropped.
pub struct Failures(std::sync::Arc<Mutex<Vec<String>>>);

impl Failures {
    /// Installs the collecting hook.
    pub fn watch() -> Self {
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        handles_core::set_report_hook(move |failure| {
            let line = format!(
                "{} {:#x}: {}",
                failure.type_name, failure.raw, failure.error
            );
            sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        });
        Failures(seen)
    }

    /// The failures reported so far.
    pub fn seen(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Panics with the failures if there were any.
    pub fn assert_none(&self) {
        let seen = self.seen();
        assert!(seen.is_empty(), "deleter failures: {seen:?}");
    }
}

/// Begins a relaxed-mode capture in `context` on a new thread and returns once its closure
/// runs; the closure never returns, so the capture stays open until the process exits (for
/// programs that check what an exit with a capture open leaves behind).
pub fn capture_held_open(context: &handles_cuda::ContextHandle) {
    use handles_cuda::graph::{CaptureMode, GraphHandle};
    let inside = std::sync::Arc::new(std::sync::Barrier::new(2));
    let entered = inside.clone();
    let context = context.clone();
    std::thread::spawn(move || {
        let _ = GraphHandle::capture(&context, CaptureMode::Relaxed, |_| {
            entered.wait();
            loop {
                std::thread::sleep(Duration::from_secs(1000));
            }
        });
    });
    inside.wait();
}

/// The end of a program that captured in `capturing`: the disposal thread's queue drains
/// (asserted), no deleter failure was reported, `capturing`'s work is done, and the thread's
/// primary-context cache is let go, so that a strict simulator's exit report lists no retain.
pub fn end_captures(failures: &Failures, capturing: handles_cuda::ContextHandle) {
    assert!(
        handles_cuda::exec::flush_disposals(Duration::from_secs(10)),
        "the disposal thread's queue did not drain"
    );
    failures.assert_none();
    capturing
        .synchronize()
        .expect("the capturing context's work failed");
    drop(capturing);
    handles_cuda::exec::clear_primary_cache();
}

impl Drop for Failures {
    fn drop(&mut self) {
        handles_core::reset_report_hook();
    }
}

/// The number of live boxes of each handles-cuda type: context, stream, event, pool, pointer,
/// once the disposal thread has finished what it was handed (a pool waiting for its frees).
pub fn cuda_live_counts() -> [usize; 5] {
    use handles_cuda::{
        ContextHandle, DevicePtrHandle, EventHandle, MemoryPoolHandle, StreamHandle,
    };
    handles_cuda::exec::flush_disposals(std::time::Duration::from_secs(10));
    let count = |count: Option<usize>| count.expect("the tests build handles-core with live-count");
    [
        count(ContextHandle::live_count()),
        count(StreamHandle::live_count()),
        count(EventHandle::live_count()),
        count(MemoryPoolHandle::live_count()),
        count(DevicePtrHandle::live_count()),
    ]
}

/// A non-blocking stream on `context`, for the GPU tests.
pub fn stream(context: &handles_cuda::ContextHandle) -> handles_cuda::StreamHandle {
    use handles_cuda::{StreamFlags, StreamHandle};
    StreamHandle::create(context, StreamFlags { non_blocking: true }, 0).unwrap()
}

/// Holds `stream` back behind a host function until the returned flag is set (or for at most
/// 20 s, so that a failing test still ends): work queued after it is pending meanwhile.
pub fn gate(stream: &handles_cuda::StreamHandle) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let open = std::sync::Arc::new(AtomicBool::new(false));
    let seen = std::sync::Arc::clone(&open);
    stream
        .launch_host(move || {
            let start = Instant::now();
            while !seen.load(Ordering::SeqCst) {
                if start.elapsed() >= Duration::from_secs(20) {
                    // Something waited for the held stream (a test's window is far shorter):
                    // said, so that the failure it leads to names its cause.
                    eprintln!("gate: opened by its 20 s limit, not by the test");
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        })
        .unwrap();
    open
}

/// Holds a stream back (the host function of [`gate`]) until opened or dropped: a failing test
/// never leaves its stream blocked.
pub struct Gate(pub std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Gate {
    /// Holds `stream` back from now on.
    pub fn hold(stream: &handles_cuda::StreamHandle) -> Gate {
        Gate(gate(stream))
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Whether the pool `raw` still answers the driver (its release threshold): a test's window on
/// a pool whose handle is gone but which must not be destroyed yet.
// The pool is never dereferenced here: the driver looks the handle up, as the tests intend.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn raw_pool_answers(raw: cudarc::driver::sys::CUmemoryPool) -> bool {
    use cudarc::driver::sys;
    let mut threshold = 0u64;
    // SAFETY: the attribute is 64 bits, written to `threshold`. If the pool was destroyed too
    // early (the failure a test asks about), `raw` names a dead pool: the driver answers an
    // error (the simulator reports a dead handle), which fails the test.
    let status = unsafe {
        sys::cuMemPoolGetAttribute(
            raw,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&raw mut threshold).cast(),
        )
    };
    status == sys::CUresult::CUDA_SUCCESS
}

/// CPU time (user + system) of this process's threads whose names start with any of
/// `prefixes`, from `/proc`: in all, and by thread. A thread takes its creator's name on Linux,
/// so a thread the driver starts from a named one is counted with it.
pub fn threads_cpu_time(prefixes: &[&str]) -> (Duration, Vec<(String, Duration)>) {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut total = 0.0;
    let mut each = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if !prefixes.iter().any(|prefix| comm.starts_with(prefix)) {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        let field = |n: usize| {
            fields
                .get(n - 3)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let used = field(14) + field(15);
        total += used;
        each.push((
            comm.trim().to_string(),
            Duration::from_secs_f64(used / ticks),
        ));
    }
    (Duration::from_secs_f64(total / ticks), each)
}

/// Polling a completion by hand, as an executor would, for the waiter and notifier programs.
pub mod polling {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};
    use std::time::{Duration, Instant};

    use handles_cuda::exec::Completion;

    /// A waker that counts its wakes.
    pub struct Counter(pub AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// `n` events recorded on `held` with their completions, then a wait of `settle` (so that
    /// the waiter has handed the first ones to notifiers, and the rest wait for room).
    pub fn pending(
        context: &handles_cuda::ContextHandle,
        held: &handles_cuda::StreamHandle,
        n: usize,
        settle: Duration,
    ) -> Vec<(handles_cuda::EventHandle, Completion)> {
        let made: Vec<_> = (0..n)
            .map(|_| {
                let event = handles_cuda::EventHandle::create(
                    context,
                    handles_cuda::exec::EventFlags::default(),
                )
                .unwrap();
                event.record(held).unwrap();
                let completion = event.completed().unwrap();
                (event, completion)
            })
            .collect();
        std::thread::sleep(settle);
        made
    }

    /// Completions behind `held`'s gate that take every busy notifier stream its context may
    /// have (`BUSY_NOTIFIERS_PER_CONTEXT`): later ones wait for room at the waiter.
    pub fn fill_room(
        context: &handles_cuda::ContextHandle,
        held: &handles_cuda::StreamHandle,
    ) -> Vec<(handles_cuda::EventHandle, Completion)> {
        pending(
            context,
            held,
            handles_cuda::exec::BUSY_NOTIFIERS_PER_CONTEXT,
            Duration::from_millis(5),
        )
    }

    /// Opens `held`'s gate, resolves every completion of `made` (each within 5 s) and drains
    /// `held`.
    pub fn open_and_drain(
        open: &std::sync::atomic::AtomicBool,
        made: Vec<(handles_cuda::EventHandle, Completion)>,
        held: &handles_cuda::StreamHandle,
    ) {
        open.store(true, Ordering::SeqCst);
        for (_, mut completion) in made {
            assert!(poll_for(&mut completion, Duration::from_secs(5)));
        }
        held.synchronize().unwrap();
    }

    /// CPU time (user + system) of the waiter thread (`handles-waiter`).
    pub fn waiter_cpu() -> Duration {
        crate::threads_cpu_time(&["handles-waiter"]).0
    }

    /// Polls `future` once with `waker`; whether it is ready.
    pub fn poll_once(future: &mut Completion, waker: &Waker) -> bool {
        let mut task = Context::from_waker(waker);
        matches!(Pin::new(future).poll(&mut task), Poll::Ready(()))
    }

    /// Polls `future` every 100 µs until it is ready or `limit` has passed; whether it resolved.
    pub fn poll_for(future: &mut Completion, limit: Duration) -> bool {
        let waker = Waker::from(Arc::new(Counter(AtomicUsize::new(0))));
        let start = Instant::now();
        loop {
            if poll_once(future, &waker) {
                return true;
            }
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

/// Helpers for tests that re-run their own test binary as a child process.
pub mod child {
    use std::process::{Command, Output};

    /// The environment variable that tells a test it runs as a child, and in which role.
    pub const ROLE: &str = "HANDLES_TEST_CHILD_ROLE";

    /// The role this process was started in, if it is a child.
    pub fn role() -> Option<String> {
        std::env::var(ROLE).ok()
    }

    /// Runs the test `name` of this same test binary in a child process with `ROLE=role` and
    /// the extra environment `env`, and returns its output.
    pub fn run(name: &str, role: &str, env: &[(&str, String)]) -> Output {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut command = Command::new(exe);
        command
            .args([
                name,
                "--exact",
                "--include-ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role);
        for (key, value) in env {
            command.env(key, value);
        }
        command.output().expect("spawn the child test process")
    }

    /// Panics with the child's output unless it exited with status 0.
    pub fn assert_success(output: &Output) {
        assert!(
            output.status.success(),
            "child failed with {:?}\n--- stdout\n{}\n--- stderr\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Runs the test `name` as a child twice, once leaving by `std::process::exit(0)` (role
    /// `exit`) and once by returning from the test (role `return`), and checks that both
    /// exit with status 0, printed `child: exiting (<role>)` and reported no deleter failure.
    pub fn assert_clean_exits(name: &str) {
        for how in ["exit", "return"] {
            let output = run(name, how, &[]);
            print!("{}", String::from_utf8_lossy(&output.stdout));
            assert_success(&output);
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                stdout.contains(&format!("child: exiting ({how})")),
                "{stdout}"
            );
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                !stderr.contains("handles: failed"),
                "{how}: a deleter failed at exit:\n{stderr}"
            );
        }
    }

    /// Lowercase hex of `bytes`.
    pub fn to_hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// Bytes of a lowercase hex string; `None` if it is not valid hex.
    pub fn from_hex(text: &str) -> Option<Vec<u8>> {
        if !text.len().is_multiple_of(2) {
            return None;
        }
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
            .collect()
    }
}

/// The kernels of `tests/kernels/test_kernels.ptx`, loaded and typed, for the GPU tests and
/// their runs on the simulated driver (which knows the same kernels).
pub mod kernels {
    use handles_cuda::{
        DevicePtrHandle, Error, KernelHandle, LibraryHandle, Result,
        code::{Buffer, TypedKernel},
    };

    /// The PTX source of the test kernels.
    pub const PTX: &str = include_str!("../kernels/test_kernels.ptx");

    /// `fill_u32(dst, value, n)`, `add_u32(data, value, n)`, `copy_u32(dst, src, n)`,
    /// `add_one(data, n)`, `spin(cycles)`.
    pub struct TestKernels {
        /// The library they were loaded from.
        pub library: LibraryHandle,
        /// `dst[i] = value` for `i < n`.
        pub fill: TypedKernel<(Buffer, u32, u32)>,
        /// `data[i] += value` for `i < n`.
        pub add: TypedKernel<(Buffer, u32, u32)>,
        /// `dst[i] = src[i]` for `i < n`.
        pub copy: TypedKernel<(Buffer, Buffer, u32)>,
        /// `data[i] += 1` for `i < n`.
        pub add_one: TypedKernel<(Buffer, u32)>,
        /// Busy-waits about `cycles` clock ticks; touches no memory.
        pub spin: TypedKernel<(u64,)>,
    }

    /// `Ok` when `n` 32-bit elements fit in `buffer`.
    fn fits(buffer: &DevicePtrHandle, n: u32) -> Result<()> {
        if (n as usize) * 4 <= buffer.size() {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{n} elements do not fit in a buffer of {} bytes",
                buffer.size()
            )))
        }
    }

    impl TestKernels {
        /// Loads the library and types its four kernels.
        pub fn load() -> Result<TestKernels> {
            let library = LibraryHandle::load_ptx(PTX)?;
            let kernel = |name: &str| KernelHandle::get(&library, name);
            // SAFETY: each signature is the kernel's PTX parameter list, and each kernel
            // touches only `n` 32-bit elements of its buffers, which the check guarantees
            // fit (`spin` touches no memory and ends after `cycles` ticks).
            unsafe {
                Ok(TestKernels {
                    fill: kernel("fill_u32")?
                        .typed(|args: &(&DevicePtrHandle, u32, u32), _| fits(args.0, args.2))?,
                    add: kernel("add_u32")?
                        .typed(|args: &(&DevicePtrHandle, u32, u32), _| fits(args.0, args.2))?,
                    copy: kernel("copy_u32")?.typed(
                        |args: &(&DevicePtrHandle, &DevicePtrHandle, u32), _| {
                            fits(args.0, args.2).and(fits(args.1, args.2))
                        },
                    )?,
                    add_one: kernel("add_one")?
                        .typed(|args: &(&DevicePtrHandle, u32), _| fits(args.0, args.1))?,
                    spin: kernel("spin")?.typed(|_, _| Ok(()))?,
                    library,
                })
            }
        }
    }

    /// The `u32`s of `buffer`, copied to the host on `stream` (which the copy synchronises).
    pub fn read_words(buffer: &DevicePtrHandle, stream: &handles_cuda::StreamHandle) -> Vec<u32> {
        let mut bytes = vec![0u8; buffer.size()];
        buffer.copy_to_host(&mut bytes, stream).unwrap();
        words(&bytes)
    }

    /// The `u32`s of `bytes`.
    pub fn words(bytes: &[u8]) -> Vec<u32> {
        bytes
            .chunks_exact(4)
            .map(|chunk| u32::from_ne_bytes(chunk.try_into().unwrap()))
            .collect()
    }
}

/// Kernels that set graph conditions (`cudaGraphSetConditional`), for the conditional-node
/// tests, the fault sweep and the capability scenario: `count_to(handle, counter, k)`,
/// `set_from(handle, selector)`, `put(out, value)`, `add_one(xs, n)`.
pub mod conditional_kernels {
    /// The kernels. `cudaGraphSetConditional` is declared by hand: NVRTC has no runtime headers,
    /// and the call is an external function that the driver resolves when it loads the PTX.
    pub const SOURCE: &str = r#"
    extern "C" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);

    // One more pass: counter[0] counts them; the k-th pass ends the loop.
    extern "C" __global__ void count_to(unsigned long long handle, unsigned int *counter,
                                        unsigned int k) {
        unsigned int passes = counter[0] + 1;
        counter[0] = passes;
        if (passes >= k) cudaGraphSetConditional(handle, 0);
    }

    // Sets the condition to selector[0].
    extern "C" __global__ void set_from(unsigned long long handle, const unsigned int *selector) {
        cudaGraphSetConditional(handle, selector[0]);
    }

    extern "C" __global__ void put(unsigned int *out, unsigned int value) { out[0] = value; }

    extern "C" __global__ void add_one(unsigned int *xs, unsigned int n) {
        unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) xs[i] += 1;
    }
    "#;

    /// Compiles [`SOURCE`] with NVRTC to PTX for compute capability 9.0 and loads it; if the
    /// driver is older than the NVRTC and refuses its PTX version, compiles a cubin for sm_90
    /// instead (a cubin runs on older drivers of the same major version).
    pub fn load() -> handles_cuda::Result<handles_cuda::LibraryHandle> {
        let ptx = compile("--gpu-architecture=compute_90")?.ptx()?;
        match handles_cuda::LibraryHandle::load_data(&ptx) {
            Err(error)
                if error.code()
                    == Some(
                        handles_cuda::driver::sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                    ) =>
            {
                handles_cuda::LibraryHandle::load_data(
                    &compile("--gpu-architecture=sm_90")?.cubin()?,
                )
            }
            loaded => loaded,
        }
    }

    fn compile(architecture: &str) -> handles_cuda::Result<handles_cuda::code::ProgramHandle> {
        let program = handles_cuda::code::ProgramHandle::new(SOURCE, "conditional_kernels.cu")?;
        match program.compile(&[architecture]) {
            Ok(()) => Ok(program),
            Err(error) => Err(handles_cuda::Error::InvalidArgument(format!(
                "{error}\n{}",
                program.log().unwrap_or_default()
            ))),
        }
    }
}

/// With `HANDLES_TESTS_CRASH_TRACE` set, a crash of this process (SIGSEGV, SIGFPE, SIGBUS,
/// SIGABRT) first writes the crashing thread's raw stack to stderr (glibc's
/// `backtrace_symbols_fd`: `object(+offset)` per frame, resolvable with `addr2line` against the
/// same binary), then dies of the signal as it would have: for a GPU machine without a
/// debugger, to tell a crash inside libcuda from one in this program. Off by default.
pub fn trace_crashes_if_asked() {
    if std::env::var_os("HANDLES_TESTS_CRASH_TRACE").is_none() {
        return;
    }
    extern "C" fn on_crash(signal: libc::c_int) {
        let mut frames = [std::ptr::null_mut::<libc::c_void>(); 64];
        let header = b"\n== crash: the crashing thread's frames\n";
        // SAFETY: `write`, `backtrace` and `backtrace_symbols_fd` are given valid buffers and
        // their lengths; none allocates (the heap may be what is broken: `backtrace` was
        // called once when the handler was installed, so libgcc_s is loaded). The handler was
        // installed with SA_RESETHAND, so raising the signal again ends the process with it.
        unsafe {
            libc::write(2, header.as_ptr().cast(), header.len());
            let count = libc::backtrace(frames.as_mut_ptr(), frames.len() as libc::c_int);
            libc::backtrace_symbols_fd(frames.as_ptr(), count, 2);
            libc::raise(signal);
        }
    }
    // The first `backtrace` loads libgcc_s, which allocates: done now, not in the handler.
    let mut warm = [std::ptr::null_mut::<libc::c_void>(); 4];
    // SAFETY: a valid buffer and its length.
    unsafe { libc::backtrace(warm.as_mut_ptr(), warm.len() as libc::c_int) };
    for signal in [libc::SIGSEGV, libc::SIGFPE, libc::SIGBUS, libc::SIGABRT] {
        // SAFETY: a zeroed `sigaction` is valid (empty mask, no flags); the handler is an
        // `extern "C" fn(c_int)` that never returns into the crashing code's frame unsafely
        // (it re-raises the signal with the default action back in place).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_crash as extern "C" fn(libc::c_int) as usize;
            // On the alternate stack std gives each thread, so a stack overflow is traced too.
            action.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER | libc::SA_ONSTACK;
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}
