//! A simulated, checking CUDA driver: `libcuda.so` for machines without a GPU.
//!
//! Built by `build.rs` as a cdylib named `cuda` into `<target>/cuda-sim/libcuda.so`, never into
//! a directory that cargo puts on the library path. It keeps the driver's lifecycle (devices,
//! contexts and green contexts, streams, events, pools, allocations, virtual memory
//! management, IPC, libraries and kernels, stream capture, graphs, user objects) in one process-wide state behind one lock, executes stream work
//! immediately on the host, and checks the program's use of the API with vector clocks (see
//! `checker`). Behaviour is configured by `CUDA_SIM_*` variables
//! read at `cuInit`; see the crate's README.
#![allow(dead_code)]
#![allow(clippy::missing_safety_doc)]

/// The export macro: every exported function counts its call, applies `CUDA_SIM_FAIL`,
/// refuses calls before `cuInit` and after shutdown, and turns a panic into an error.
macro_rules! export_fns {
    ($( $(#[$meta:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block )*) => {$(
        $(#[$meta])*
        #[cfg_attr(not(test), unsafe(no_mangle))]
        #[allow(clippy::missing_safety_doc, non_snake_case)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> crate::base::types::CuResult {
            crate::api::faults::call(stringify!($name), || -> Result<(), crate::base::types::CuResult> {
                $body
            })
        }
    )*};
}

// The folders, lowest first; each imports only from the ones before it (checked by
// `layers.py cuda-sim/src/driver --layers base,order,resources,device,check,api,libs`). The root
// below holds the process-wide state they all share (`Sim`, behind one lock).
pub(crate) mod api;
pub(crate) mod base;
pub(crate) mod check;
pub(crate) mod device;
pub(crate) mod libs;
pub(crate) mod order;
pub(crate) mod resources;

use api::{exports_cudarc, faults, graph_memory};
use base::{errors, types};
use check::{host_access, initcheck, report};
use order::{checker, races};
use resources::{
    capture, conditional, contexts, deferred, devices, events, graphs, green, kernels, libraries,
    library_handles, memory, pools, streams, user_objects, vmm,
};

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use capture::{Capturing, Session};
use checker::Checker;
use contexts::Context;
use devices::Device;
use errors::{DEINITIALIZED, NOT_INITIALIZED};
use events::Event;
use graphs::{Graph, GraphExec};
use green::{GreenContext, ResourceDesc};
use kernels::{Function, Kernel};
use libraries::Library;
use memory::{Alloc, Tomb};
use pools::Pool;
use streams::Stream;
use types::{CuResult, Raw};
use user_objects::UserObject;
use vmm::Vmm;

/// The simulator's configuration, from the environment at `cuInit`.
#[derive(Clone, Debug)]
pub struct Config {
    pub devices: usize,
    pub memory: u64,
    pub strict: bool,
    pub report: Option<String>,
    /// `CUDA_SIM_NO_GREEN_CONTEXTS`: play a driver without green contexts.
    pub no_green_contexts: bool,
    /// `CUDA_SIM_CHECK_DATA_RACE` (on unless `0`): report unordered operations touching the
    /// same bytes, one of them writing (`races`).
    pub check_data_race: bool,
    /// `CUDA_SIM_CHECK_INITCHECK` (on unless `0`): report reads of device memory never
    /// written, and note allocations never touched (`initcheck`).
    pub check_initcheck: bool,
    /// `CUDA_SIM_CHECK_SYNCCHECK` (on unless `0`): report divergent block barriers and warp
    /// member masks naming exited or absent lanes (`cuda_sim_ptx::LaunchArgs::synccheck`).
    pub check_synccheck: bool,
    /// `CUDA_SIM_CHECK_RACECHECK` (on unless `0`): report shared-memory hazards
    /// between the threads of a block (`cuda_sim_ptx::LaunchArgs::racecheck`).
    pub check_racecheck: bool,
    /// `CUDA_SIM_REUSE_STREAMS`: a new stream takes the address of the stream destroyed last
    /// (its queued work may still be pending), as driver 580 does, instead of a fresh one.
    /// Off by default, so that a use of a destroyed stream is reported as one.
    pub reuse_streams: bool,
}

impl Config {
    fn from_env() -> Config {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        // Every check is on unless its variable is `0`.
        let check = |name: &str| var(name).is_none_or(|value| value != "0");
        Config {
            devices: var("CUDA_SIM_DEVICES")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1),
            memory: var("CUDA_SIM_MEMORY")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1 << 30),
            strict: var("CUDA_SIM_STRICT").is_some_and(|v| v != "0"),
            report: var("CUDA_SIM_REPORT"),
            no_green_contexts: var("CUDA_SIM_NO_GREEN_CONTEXTS").is_some_and(|v| v != "0"),
            check_data_race: check("CUDA_SIM_CHECK_DATA_RACE"),
            check_initcheck: check("CUDA_SIM_CHECK_INITCHECK"),
            check_synccheck: check("CUDA_SIM_CHECK_SYNCCHECK"),
            check_racecheck: check("CUDA_SIM_CHECK_RACECHECK"),
            reuse_streams: var("CUDA_SIM_REUSE_STREAMS").is_some_and(|v| v != "0"),
        }
    }
}

/// Which kind of object a raw handle names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Context,
    Stream,
    Event,
    Pool,
    Library,
    Kernel,
    Function,
    Graph,
    GraphNode,
    GraphExec,
    UserObject,
    MemHandle,
    GreenContext,
    ResourceDesc,
    Module,
    Conditional,
    BlasHandle,
    BlasLtHandle,
    BlasLtObject,
    RandGenerator,
}

impl Kind {
    fn tag(self) -> usize {
        match self {
            Kind::Context => 0xc1,
            Kind::Stream => 0x51,
            Kind::Event => 0xe1,
            Kind::Pool => 0x91,
            Kind::Library => 0x11,
            Kind::Kernel => 0x2e,
            Kind::Function => 0xf1,
            Kind::Graph => 0x61,
            Kind::GraphNode => 0x6e,
            Kind::GraphExec => 0x6c,
            Kind::UserObject => 0x0b,
            Kind::MemHandle => 0x4d,
            Kind::GreenContext => 0x9c,
            Kind::ResourceDesc => 0xde,
            Kind::Module => 0x3d,
            Kind::Conditional => 0xcd,
            Kind::BlasHandle => 0xb1,
            Kind::BlasLtHandle => 0xb2,
            Kind::BlasLtObject => 0xb3,
            Kind::RandGenerator => 0x7a,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Context => "context",
            Kind::Stream => "stream",
            Kind::Event => "event",
            Kind::Pool => "memory pool",
            Kind::Library => "library",
            Kind::Kernel => "kernel",
            Kind::Function => "function",
            Kind::Graph => "graph",
            Kind::GraphNode => "graph node",
            Kind::GraphExec => "graph exec",
            Kind::UserObject => "user object",
            Kind::MemHandle => "physical allocation handle",
            Kind::GreenContext => "green context",
            Kind::ResourceDesc => "resource descriptor",
            Kind::Module => "module",
            Kind::Conditional => "conditional handle",
            Kind::BlasHandle => "cuBLAS handle",
            Kind::BlasLtHandle => "cuBLASLt handle",
            Kind::BlasLtObject => "cuBLASLt descriptor",
            Kind::RandGenerator => "cuRAND generator",
        }
    }
}

/// A destroyed handle: raw values are never reused (streams' are with
/// `CUDA_SIM_REUSE_STREAMS`), so a later use is recognised.
#[derive(Clone, Debug)]
pub struct Grave {
    pub kind: Kind,
    pub call: &'static str,
    pub seq: u64,
}

/// The whole simulated driver.
pub struct Sim {
    pub config: Config,
    pub devices: Vec<Device>,
    pub contexts: HashMap<Raw, Context>,
    pub streams: HashMap<Raw, Stream>,
    pub events: HashMap<Raw, Event>,
    pub pools: HashMap<Raw, Pool>,
    pub libraries: HashMap<Raw, Library>,
    pub kernels: HashMap<Raw, Kernel>,
    pub functions: HashMap<Raw, Function>,
    pub graphs: HashMap<Raw, Graph>,
    pub execs: HashMap<Raw, GraphExec>,
    pub user_objects: HashMap<Raw, UserObject>,
    pub greens: HashMap<Raw, GreenContext>,
    pub descs: HashMap<Raw, ResourceDesc>,
    /// Physical allocations, reservations and mappings (`vmm`).
    pub vmm: Vmm,
    /// Capture sessions by id, and the streams (timelines) taking part in one.
    pub sessions: HashMap<u64, Session>,
    pub capturing: HashMap<usize, Capturing>,
    pub next_capture: u64,
    pub graves: HashMap<Raw, Grave>,
    pub allocs: BTreeMap<u64, Alloc>,
    pub tombs: BTreeMap<u64, Tomb>,
    pub tomb_order: VecDeque<(u64, u64)>,
    pub checker: Checker,
    /// Work queued behind host functions (`deferred`).
    pub deferred: deferred::Deferred,
    pub next_id: usize,
    /// Destroyed streams' addresses, for `CUDA_SIM_REUSE_STREAMS`, the last destroyed last.
    pub free_streams: Vec<Raw>,
    /// Modules, managed-memory advice, context limits (`exports_cudarc`).
    pub extra: exports_cudarc::Extra,
    /// Conditional handles and nodes (`conditional`).
    pub conditionals: conditional::Conditionals,
    /// Graph-owned memory's reservations and the executable graphs of memory-node graphs.
    pub graph_memory: graph_memory::GraphMemory,
    /// The footprints of operations not yet ordered before every timeline (`races`).
    pub races: races::Races,
    /// The written bytes of device allocations, and untouched ones (`initcheck`).
    pub initcheck: initcheck::Initcheck,
    /// cuBLAS handles and cuRAND generators (`library_handles`, used by `libs`).
    pub library_handles: library_handles::LibraryHandles,
}

static SIM: Mutex<Option<Sim>> = Mutex::new(None);
/// Set once the exit handler has run: the driver has shut down.
static SHUT_DOWN: AtomicBool = AtomicBool::new(false);

fn lock() -> MutexGuard<'static, Option<Sim>> {
    SIM.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `f` on the initialised simulator.
pub fn with_sim<T>(f: impl FnOnce(&mut Sim) -> Result<T, CuResult>) -> Result<T, CuResult> {
    if SHUT_DOWN.load(Ordering::SeqCst) {
        return Err(DEINITIALIZED);
    }
    let mut guard = lock();
    match guard.as_mut() {
        Some(sim) => {
            sim.host_access_begin();
            let result = f(sim);
            sim.host_access_end();
            result
        }
        None => Err(NOT_INITIALIZED),
    }
}

/// Signalled whenever queued work ran (`deferred`): the host's waits check again.
static IDLE: Condvar = Condvar::new();

/// Runs `f` on the initialised simulator until it answers `Some`, waiting (with the lock
/// released) for queued work to run between tries: the host's synchronisations.
pub fn wait_for<T>(
    mut f: impl FnMut(&mut Sim) -> Result<Option<T>, CuResult>,
) -> Result<T, CuResult> {
    if SHUT_DOWN.load(Ordering::SeqCst) {
        return Err(DEINITIALIZED);
    }
    let mut guard = lock();
    loop {
        let Some(sim) = guard.as_mut() else {
            return Err(NOT_INITIALIZED);
        };
        sim.host_access_begin();
        let answer = f(sim);
        sim.host_access_end();
        if let Some(value) = answer? {
            return Ok(value);
        }
        guard = IDLE
            .wait(guard)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
    }
}

/// Wakes the host's waits (queued work ran).
pub fn notify_idle() {
    IDLE.notify_all();
}

/// `cuInit`: reads the configuration once and builds the devices.
pub fn init(flags: u32) -> Result<(), CuResult> {
    if flags != 0 {
        return Err(errors::INVALID_VALUE);
    }
    if SHUT_DOWN.load(Ordering::SeqCst) {
        return Err(DEINITIALIZED);
    }
    let mut guard = lock();
    if guard.is_none() {
        let config = Config::from_env();
        let checker = Checker::new(config.strict);
        let mut sim = Sim {
            devices: Vec::new(),
            contexts: HashMap::new(),
            streams: HashMap::new(),
            events: HashMap::new(),
            pools: HashMap::new(),
            libraries: HashMap::new(),
            kernels: HashMap::new(),
            functions: HashMap::new(),
            graphs: HashMap::new(),
            execs: HashMap::new(),
            user_objects: HashMap::new(),
            greens: HashMap::new(),
            descs: HashMap::new(),
            vmm: Vmm::default(),
            sessions: HashMap::new(),
            capturing: HashMap::new(),
            next_capture: 1,
            graves: HashMap::new(),
            allocs: BTreeMap::new(),
            tombs: BTreeMap::new(),
            tomb_order: VecDeque::new(),
            checker,
            deferred: deferred::Deferred::default(),
            next_id: 1,
            free_streams: Vec::new(),
            extra: Default::default(),
            conditionals: Default::default(),
            graph_memory: Default::default(),
            races: races::Races::new(config.check_data_race),
            initcheck: initcheck::Initcheck::new(config.check_initcheck),
            library_handles: Default::default(),
            config,
        };
        for ordinal in 0..sim.config.devices {
            sim.add_device(ordinal);
        }
        if sim.races.enabled() {
            host_access::install();
        }
        *guard = Some(sim);
        report::register_exit_handler();
    }
    let sim = guard.as_ref().expect("initialised above");
    if sim.devices.is_empty() {
        return Err(errors::NO_DEVICE);
    }
    Ok(())
}

/// Shuts the driver down (at process exit) and hands the final state to `f` (`None` if
/// `cuInit` never succeeded).
pub fn shut_down<T>(f: impl FnOnce(Option<&Sim>) -> T) -> T {
    let mut guard = lock();
    if let Some(sim) = guard.as_mut() {
        // The faults noted since the last call are reported, and the pages made accessible
        // for the rest of the exit.
        sim.host_access_begin();
    }
    let result = f(guard.as_ref());
    SHUT_DOWN.store(true, Ordering::SeqCst);
    result
}

impl Sim {
    /// A fresh raw handle value of `kind`, never handed out before.
    pub fn new_raw(&mut self, kind: Kind) -> Raw {
        let id = self.next_id;
        self.next_id += 1;
        (kind.tag() << 40) | (id << 4)
    }

    /// Records the destruction of `raw`.
    pub fn bury(&mut self, raw: Raw, kind: Kind) {
        let (call, seq) = faults::current_call();
        self.graves.insert(raw, Grave { kind, call, seq });
    }

    /// The error for a raw handle of `kind` that names no live object: reports a use of a
    /// destroyed handle (or a double destroy when `destroying`).
    pub fn dead_handle(&mut self, raw: Raw, kind: Kind, destroying: bool) -> CuResult {
        match self.graves.get(&raw).cloned() {
            Some(grave) => {
                let what = if destroying {
                    "double-destroy"
                } else {
                    "destroyed-handle"
                };
                self.checker.violation(
                    what,
                    format!(
                        "{} {raw:#x} was destroyed by {} (call #{})",
                        grave.kind.name(),
                        grave.call,
                        grave.seq
                    ),
                );
                if kind == Kind::Context {
                    errors::CONTEXT_IS_DESTROYED
                } else {
                    errors::INVALID_HANDLE
                }
            }
            None => {
                if raw != 0 {
                    self.checker.violation(
                        "destroyed-handle",
                        format!("{raw:#x} is not a {} this driver created", kind.name()),
                    );
                }
                if kind == Kind::Context {
                    errors::INVALID_CONTEXT
                } else {
                    errors::INVALID_HANDLE
                }
            }
        }
    }
}
