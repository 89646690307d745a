//! The crate's error type: a driver status with its name, or a clear reason for bad input.

use cudarc::driver::sys::CUresult;

/// What went wrong in a call to this crate. Input refused before any driver call is a variant
/// of its own that carries the values involved, so that callers match on it rather than on
/// text; the enum is `#[non_exhaustive]`: more variants may come.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No CUDA driver library (`libcuda.so`) could be loaded on this machine.
    #[error("no CUDA driver found: libcuda could not be loaded")]
    DriverNotFound,
    /// A driver call returned an error status.
    #[error("{call} failed: {name} ({code})", code = *.code as u32)]
    Driver {
        /// The driver function that failed.
        call: &'static str,
        /// The status it returned.
        code: CUresult,
        /// The status's name, as `cuGetErrorName` gives it.
        name: &'static str,
    },
    /// The driver is older than this crate, or than the function called, needs.
    #[error("the CUDA driver reports version {version}, which is too old: {needed}")]
    DriverTooOld {
        /// The version `cuDriverGetVersion` reported (1000 × major + 10 × minor).
        version: i32,
        /// What needs a newer driver, and which version.
        needed: &'static str,
    },
    /// The driver lacks a function newer than CUDA 12.0: it is older than the version that
    /// brought it, or does not export it. Nothing was called.
    #[error("{function} needs CUDA {}.{} or newer, which this driver is not", needs / 1000, needs % 1000 / 10)]
    NotSupported {
        /// The driver function that would have been called.
        function: &'static str,
        /// The CUDA version that brought it (1000 × major + 10 × minor).
        needs: i32,
    },
    /// `len` bytes at `offset` do not lie within the `size` bytes of an allocation, a view, a
    /// mapping or a reservation (a copy, a memset, a view, a map or a grow).
    #[error(
        "invalid argument: {len} bytes at offset {offset} do not fit in an allocation of {size} bytes"
    )]
    OutOfRange {
        /// The first byte asked for.
        offset: usize,
        /// How many bytes were asked for.
        len: usize,
        /// The size of what they must lie in.
        size: usize,
    },
    /// `count` elements from element `start` are not within a typed buffer of `len` elements
    /// (a copy, or a slice). `start + count` may overflow: it is never computed.
    #[error(
        "invalid argument: {count} elements from element {start} are not within the buffer's {len} elements"
    )]
    ElementsOutOfRange {
        /// The first element asked for.
        start: usize,
        /// How many elements were asked for.
        count: usize,
        /// The buffer's length in elements.
        len: usize,
    },
    /// A range whose end comes before its start.
    #[error("invalid argument: the range {start}..{end} ends before it starts")]
    ReversedRange {
        /// The range's start.
        start: usize,
        /// The range's end.
        end: usize,
    },
    /// Memory whose address is not a multiple of the element type's alignment: a kernel that
    /// reads `element`s from it would fault (`CUDA_ERROR_MISALIGNED_ADDRESS`).
    #[error(
        "invalid argument: address {address:#x} is not aligned for {element} (a multiple of {align} bytes)"
    )]
    MisalignedElements {
        /// The memory's device address.
        address: u64,
        /// The element type.
        element: &'static str,
        /// The element type's alignment in bytes.
        align: usize,
    },
    /// A typed buffer of a zero-sized type, which holds no bytes to allocate or copy.
    #[error("invalid argument: {element} is zero-sized: a device buffer of it holds nothing")]
    ZeroSizedElement {
        /// The element type.
        element: &'static str,
    },
    /// A copy between typed buffers of different lengths.
    #[error("invalid argument: copying {src} elements into a buffer of {dst}")]
    LengthMismatch {
        /// The source's length in elements.
        src: usize,
        /// The destination's length in elements.
        dst: usize,
    },
    /// The source and destination of a copy overlap.
    #[error("invalid argument: the source and destination ranges overlap ({len} bytes)")]
    Overlap {
        /// The length of the copy.
        len: usize,
    },
    /// Copy `index` of a batch ([`crate::exec::StreamHandle::copy_batch`]) was refused for
    /// `cause` (a range outside its buffer, a source overlapping its destination, memory the
    /// stream's device cannot reach); nothing of the batch was queued.
    #[error("copy {index} of the batch: {cause}")]
    InBatch {
        /// The copy's position in the batch.
        index: usize,
        /// Why it was refused.
        cause: Box<Error>,
    },
    /// Two copies of one batch touch the same bytes, and at least one of them writes them:
    /// copies in a batch run in no particular order, so the result would depend on the order
    /// the driver picks. Nothing of the batch was queued.
    #[error(
        "invalid argument: copies {first} and {second} of the batch touch the same bytes and one of them writes them; copies in a batch run in no particular order"
    )]
    BatchConflict {
        /// The lower position of the two copies.
        first: usize,
        /// The higher position.
        second: usize,
    },
    /// Memory that is not a whole number of elements of the type asked for.
    #[error(
        "invalid argument: {size} bytes are not a whole number of {element} ({element_size} bytes each)"
    )]
    NotWholeElements {
        /// The memory's size in bytes.
        size: usize,
        /// The element type.
        element: &'static str,
        /// The element type's size in bytes.
        element_size: usize,
    },
    /// `count` elements of `element` (rounded up where a granularity applies) are more bytes
    /// than the address space holds.
    #[error("invalid argument: {count} elements of {element} do not fit in the address space")]
    TooLarge {
        /// How many elements were asked for.
        count: usize,
        /// The element type (`u8` for a size in bytes).
        element: &'static str,
    },
    /// More of something than the interface can pass (`count` against `max`).
    #[error("invalid argument: {count} {what} are more than the {max} that can be passed")]
    TooMany {
        /// How many were given.
        count: usize,
        /// What they are, in words (plural).
        what: &'static str,
        /// The most that can be passed.
        max: usize,
    },
    /// A mapping that starts inside its physical allocation: the driver maps physical memory
    /// only from its start.
    #[error("invalid argument: the driver maps physical memory only from offset 0, not {offset}")]
    PhysicalOffset {
        /// The offset asked for.
        offset: usize,
    },
    /// A size, a count or a list that must not be zero or empty was.
    #[error("invalid argument: {what}")]
    ZeroSize {
        /// What needs at least one, in words.
        what: &'static str,
    },
    /// Offsets or a size of a virtual-memory mapping that are not non-zero multiples of the
    /// allocation granularity.
    #[error(
        "invalid argument: offsets and size must be non-zero multiples of the granularity ({granularity} bytes)"
    )]
    Misaligned {
        /// The offset in the reservation.
        offset: usize,
        /// The size of the mapping.
        size: usize,
        /// The granularity, in bytes.
        granularity: usize,
    },
    /// A launch configuration or option the kernel or the device cannot take.
    #[error("invalid argument: invalid launch configuration: {what}")]
    BadLaunch {
        /// Which limit the launch exceeds.
        what: LaunchProblem,
    },
    /// A tensor map description that the driver would refuse, or that would let the tensor
    /// memory accelerator reach past its buffer.
    #[error("invalid argument: invalid tensor map: {what}")]
    BadTensorMap {
        /// What is wrong with it.
        what: TensorMapProblem,
    },
    /// A kernel's parameter list, as the driver reports it, differs from the one asked for.
    #[error(
        "invalid argument: kernel {kernel:?} takes parameters of {expected:?} bytes, not {found:?}"
    )]
    ParamMismatch {
        /// The kernel's name.
        kernel: String,
        /// The sizes of the kernel's parameters, in bytes.
        expected: Vec<usize>,
        /// The sizes of the parameters asked for.
        found: Vec<usize>,
    },
    /// A launch refused by a kernel's ready-made bounds check ([`crate::code::check`]):
    /// parameter `param` (counted from 0) holds `len` elements, and the launch needs `needed`.
    #[error(
        "invalid argument: kernel {kernel:?}: parameter {param} holds {len} elements, and this launch needs {needed}"
    )]
    OutOfBounds {
        /// The kernel's name.
        kernel: String,
        /// The parameter's position in the kernel's parameter list, from 0.
        param: usize,
        /// The elements the launch needs (saturated at `u64::MAX`).
        needed: u64,
        /// The elements the argument holds.
        len: usize,
    },
    /// A launch refused by a kernel's ready-made shared-memory check
    /// ([`crate::code::check::shared_per_thread`]): it asks for `bytes` of dynamic shared
    /// memory per block, and its blocks need `needed`.
    #[error(
        "invalid argument: kernel {kernel:?}: the launch gives {bytes} bytes of dynamic shared memory per block, and its blocks need {needed}"
    )]
    SharedOutOfBounds {
        /// The kernel's name.
        kernel: String,
        /// The bytes per block the launch needs (saturated at `u64::MAX`).
        needed: u64,
        /// The dynamic shared memory per block the launch asks for.
        bytes: u32,
    },
    /// A ready-made bounds check that names parameter `param` for something it is not (a
    /// count that is not an integer scalar, a buffer that is not `Elements<T>`, a position past
    /// the last parameter): refused when the kernel is declared, not at a launch.
    #[error(
        "invalid argument: the bounds check of kernel {kernel:?} names parameter {param}, which {what}"
    )]
    BadCheck {
        /// The kernel's name.
        kernel: String,
        /// The parameter's position, from 0.
        param: usize,
        /// What is wrong with it, in words.
        what: &'static str,
    },
    /// The library has no kernel of that name (the driver's `CUDA_ERROR_NOT_FOUND`). A kernel
    /// compiled as C++ has a mangled name (`_Z5saxpyfPKfPfj`) unless it is declared
    /// `extern "C"`.
    #[error(
        "no kernel named {name:?} in the library{}; a kernel compiled as C++ has a mangled name unless it is declared `extern \"C\"`",
        if known.is_empty() { String::new() } else { format!(" (its kernels: {})", known.join(", ")) }
    )]
    KernelNotFound {
        /// The name asked for.
        name: String,
        /// The kernels the library holds, where its image says (PTX, cubin); empty otherwise.
        known: Vec<String>,
    },
    /// Stream-ordered work on a stream other than the capture's, from inside the closure of
    /// [`GraphHandle::capture`](crate::graph::GraphHandle::capture) on its thread: it would
    /// run at once and be left out of the graph. Queue it through the closure's `Capture`.
    #[error(
        "stream-ordered work on another stream inside a capture's closure would run at once and be left out of the graph; queue it through the `Capture`"
    )]
    OutsideCapture,
    /// NVRTC cannot compile for the device: it supports none of the architectures up to the
    /// device's compute capability.
    #[error(
        "NVRTC {}.{} cannot compile for compute capability {}.{}: the oldest architecture it supports is {oldest}",
        nvrtc.0, nvrtc.1, device.0, device.1
    )]
    ArchitectureUnsupported {
        /// The device's compute capability, `(major, minor)`.
        device: (u32, u32),
        /// NVRTC's version, `(major, minor)`.
        nvrtc: (i32, i32),
        /// The oldest architecture NVRTC compiles for (`75` for `sm_75`).
        oldest: u32,
    },
    /// An image that is not a complete cubin, fatbin or PTX text (the driver would read past
    /// it, or cannot load it).
    #[error("invalid argument: not a loadable device-code image: {reason}")]
    BadImage {
        /// What is wrong with it.
        reason: String,
    },
    /// A string passed to the driver or NVRTC contains a NUL byte.
    #[error("invalid argument: the {what} contains a NUL byte")]
    InteriorNul {
        /// Which string, in words (a path or a name includes its value).
        what: String,
    },
    /// An IPC payload (bytes from another process) that is malformed or claims more than the
    /// driver mapped.
    #[error("invalid argument: {reason}")]
    BadIpcPayload {
        /// What is wrong with it.
        reason: String,
    },
    /// Only objects created for interprocess or shareable use can be exported; this one was not.
    #[error("invalid argument: {what}")]
    NotExportable {
        /// What can be exported, in words.
        what: &'static str,
    },
    /// Only owned stream-ordered allocations have a deallocation stream; this one is not.
    #[error("invalid argument: only owned stream-ordered allocations have a deallocation stream")]
    NotStreamOrdered,
    /// Event flags that do not allow the operation (timing, interprocess).
    #[error("invalid argument: {what}")]
    BadFlags {
        /// The rule, in words.
        what: &'static str,
    },
    /// A device ordinal that this machine (or the kernel's per-device record) does not have.
    #[error(
        "invalid argument: device ordinal {ordinal} is out of range: this machine has {count} CUDA device(s)"
    )]
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices there are.
        count: usize,
    },
    /// An object of one device used where one of another device is needed.
    #[error("invalid argument: {what} must be on device {expected}, and this one is {}",
        match found { Some(found) => format!("on device {found}"), None => "not on a device".into() })]
    WrongDevice {
        /// What must be on the device, in words ("a device's current pool").
        what: &'static str,
        /// The device needed.
        expected: usize,
        /// The device of what was passed, if it is on one.
        found: Option<usize>,
    },
    /// A location where no physical allocation can be made: a host NUMA node that is not one
    /// (`numa_node`), or the host without a node (`None`).
    #[error("invalid argument: {}", match numa_node {
        Some(node) => format!("host NUMA node {node} is not a node"),
        None => "physical allocations live on a device or a host NUMA node".into(),
    })]
    BadLocation {
        /// The host NUMA node asked for, if one was.
        numa_node: Option<i32>,
    },
    /// A device asked for more SMs than it has, or than it can split off into one group.
    #[error("invalid argument: {}", if requested > available {
        format!("device {device} has {available} SMs, fewer than the {requested} asked for")
    } else {
        format!("device {device}'s SMs cannot be split into a group of {requested}")
    })]
    SmCount {
        /// The device.
        device: usize,
        /// The SMs asked for.
        requested: u32,
        /// The SMs the device has.
        available: u32,
    },
    /// Memory that the device of the work (a kernel, a copy) cannot reach. `owner` is the
    /// memory's device (`None` for a virtual-memory mapping or a host pool without access for
    /// `device`);
    /// `pool` says whether it is pool memory, to which access can be granted.
    #[error("invalid argument: {}", match (owner, pool) {
        (None, false) => format!("mapped memory without access for device {device}"),
        (None, true) => format!(
            "memory of a host pool is not accessible from device {device} (grant it with \
             MemoryPoolHandle::set_peer_access)"
        ),
        (Some(owner), true) => format!(
            "memory of device {owner}'s pool is not accessible from device {device} (grant it \
             with MemoryPoolHandle::set_peer_access)"
        ),
        (Some(owner), false) => format!(
            "a synchronous allocation of device {owner} cannot be passed to a kernel on device \
             {device}"
        ),
    })]
    Unreachable {
        /// The device the work runs on.
        device: usize,
        /// The memory's device, if it has one.
        owner: Option<usize>,
        /// Whether the memory comes from a pool (whose peer access can be granted).
        pool: bool,
    },
    /// A device's access to a pool is being revoked, and work from it on the pool's memory is
    /// refused until the revocation ends.
    #[error(
        "a device's access to this pool is being revoked; work from another device on its memory is refused until the revocation ends"
    )]
    Revoking,
    /// The memory is lent to the host through a view (`host_view`, `host_view_mut`): while the
    /// view lives, work on the memory is refused, and so is a view that would conflict with it
    /// (any view while a mutable one lives, a mutable one while any lives).
    #[error(
        "the memory is lent to the host through a {} view; work on it, and conflicting views, are refused until the view drops",
        if *mutable { "mutable" } else { "shared" }
    )]
    HostAccessActive {
        /// Whether the view in the way is mutable.
        mutable: bool,
    },
    /// Host views are only for memory the host can address and this crate tracks: managed
    /// memory (on a device with concurrent managed access) and owned pinned host memory
    /// (`alloc_host`, a host pool's allocations), or views of them.
    #[error("invalid argument: {what}")]
    NotHostAccessible {
        /// Why this memory has no host view, in words.
        what: &'static str,
    },
    /// Prefetches, advice and stream attachment are only for managed memory (`alloc_managed`).
    #[error(
        "invalid argument: only managed memory (alloc_managed) can be prefetched, advised or attached"
    )]
    NotManaged,
    /// No context is current on this thread, and the operation needs one.
    #[error("invalid argument: {what}")]
    NoCurrentContext {
        /// What needs it, in words.
        what: &'static str,
    },
    /// A context of the wrong kind or identity: another context than the object's, one that
    /// nothing here keeps alive, or one that is not a device's primary context.
    #[error("invalid argument: {what}")]
    WrongContext {
        /// The rule, in words.
        what: &'static str,
    },
    /// A graph node of another graph used as a dependency.
    #[error(
        "invalid argument: a dependency node belongs to graph {node_graph}, not to this graph ({graph})"
    )]
    ForeignNode {
        /// The graph the node belongs to.
        node_graph: u64,
        /// The graph it was given to.
        graph: u64,
    },
    /// A conditional handle used outside the graph it was made for: as the handle of a
    /// conditional node of a graph other than its own or one nested in it, or as a kernel
    /// argument in another graph (`graph` is 0 for a launch on a stream, which no graph runs).
    #[error(
        "invalid argument: the conditional handle belongs to graph {handle_graph}, and cannot be used {place} (graph {graph})"
    )]
    ForeignConditional {
        /// The graph the handle was made for.
        handle_graph: u64,
        /// The graph it was given to (0: none).
        graph: u64,
        /// Where it was used.
        place: &'static str,
    },
    /// A conditional handle given to a second conditional node: each handle drives one node.
    #[error("invalid argument: the conditional handle already drives a conditional node")]
    ConditionalInUse,
    /// A node the driver does not allow in a conditional node's body graph (host, event and
    /// memory nodes, or a child graph holding one).
    #[error("invalid argument: {what} cannot be added to a conditional node's body graph")]
    NotInConditionalBody {
        /// The node refused.
        what: &'static str,
    },
    /// A graph with a conditional node (which the driver cannot copy) or a conditional handle
    /// (whose setters would run outside its graph) given as a child graph.
    #[error("invalid argument: a graph with conditional nodes or handles cannot be a child graph")]
    ConditionalInChild,
    /// A conditional node's body graph used as a graph of its own (instantiated, or the source
    /// of an update): it belongs to its node, and runs only as part of its outermost graph.
    #[error(
        "invalid argument: {what} a conditional node's body graph, which runs only inside its node"
    )]
    ConditionalBodyAlone {
        /// What was attempted.
        what: &'static str,
    },
    /// An executable graph that cannot be updated from a graph (`cuGraphExecUpdate`).
    #[error(
        "invalid argument: the executable graph cannot take this graph's nodes ({result}): {driver}"
    )]
    GraphUpdate {
        /// The driver's update result, by name.
        result: String,
        /// The driver's error.
        driver: Box<Error>,
    },
    /// A rule of graph-owned memory (allocation and free nodes), of per-node updates of an
    /// executable graph, or of a multi-stream capture was broken; nothing was changed.
    #[error("invalid argument: {0}")]
    GraphRule(GraphRule),
    /// The stream is being captured into a graph by other code: stream-ordered work through
    /// handles is refused on it until the capture ends.
    #[error(
        "the stream is being captured into a graph by other code; stream-ordered work through handles is refused on it until the capture ends (capture with `GraphHandle::capture`)"
    )]
    Capturing,
    /// Work on a resource could not be ordered before, or waited for before, its release: the
    /// resource is leaked rather than released while that work may still run.
    #[error("{what}")]
    Unordered {
        /// What could not be ordered, in words.
        what: &'static str,
    },
    /// A driver call succeeded but made nothing (no graph, no pointer).
    #[error("{what}")]
    NothingMade {
        /// What was not made, in words.
        what: &'static str,
    },
    /// The driver answered something that cannot be true (a device id that is not among the
    /// machine's devices, a kernel with more parameters than a launch can pass). Nothing was
    /// done with the answer.
    #[error("{call} answered something impossible: {what}")]
    DriverAnomaly {
        /// The driver function that answered.
        call: &'static str,
        /// What it answered, in words.
        what: String,
    },
    /// Taking descriptor `fd` of process `pid` (`pidfd_open`, then `pidfd_getfd`) failed with
    /// `errno`: `ENOSYS`, a kernel without the call (`pidfd_getfd` needs Linux 5.6); `EPERM`,
    /// not permitted (the caller may not ptrace-attach to `pid`: see
    /// [`ipc::take_fd`](crate::ipc::take_fd)); `ESRCH`, no such process (it exited); `EBADF`,
    /// the process has no descriptor `fd` open; `EINVAL`, a pid of 0 or above `i32::MAX`.
    #[error("taking descriptor {fd} of process {pid} failed: {call}: {}", fd_take_reason(*.errno))]
    FdTake {
        /// The system call that failed: `"pidfd_open"` or `"pidfd_getfd"`.
        call: &'static str,
        /// The process asked.
        pid: u32,
        /// The descriptor number in that process.
        fd: i32,
        /// The error number (`libc::EPERM`, ...).
        errno: i32,
    },
    /// An argument was rejected before any driver call, for a reason no other variant names
    /// (and the error of user-written checks, such as a kernel's bounds check).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No NVRTC library (`libnvrtc.so`) could be loaded on this machine.
    #[error("no NVRTC found: libnvrtc could not be loaded")]
    NvrtcNotFound,
    /// An NVRTC call failed; for a failed compilation, `log` is the compiler's log.
    #[error("{call} failed: {status}{}", if log.is_empty() { String::new() } else { format!("\n{log}") })]
    Nvrtc {
        /// The NVRTC function that failed.
        call: &'static str,
        /// Its status, as `nvrtcGetErrorString` names it.
        status: String,
        /// The program's compilation log (empty when not a compilation).
        log: String,
    },
}

/// Which limit a launch configuration exceeds ([`Error::BadLaunch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchProblem {
    /// A grid dimension of 0 or above the limit.
    #[error("grid {axis} is {blocks}; it must be between 1 and {limit}")]
    Grid {
        /// `'x'`, `'y'` or `'z'`.
        axis: char,
        /// The blocks asked for on that axis.
        blocks: u32,
        /// The most on that axis.
        limit: u32,
    },
    /// A block dimension of 0 or above the limit.
    #[error("block {axis} is {threads}; it must be between 1 and {limit}")]
    Block {
        /// `'x'`, `'y'` or `'z'`.
        axis: char,
        /// The threads asked for on that axis.
        threads: u32,
        /// The most on that axis.
        limit: u32,
    },
    /// More threads per block than the kernel allows on the device.
    #[error(
        "a block of {threads} threads is more than the {max} this kernel allows on this device"
    )]
    ThreadsPerBlock {
        /// The threads per block asked for.
        threads: u64,
        /// The kernel's maximum on the device.
        max: u32,
    },
    /// More dynamic shared memory than the kernel allows on the device.
    #[error(
        "{bytes} bytes of dynamic shared memory is more than the {max} this kernel allows on this device (raise it with KernelAttribute::MaxDynamicSharedSizeBytes)"
    )]
    SharedMemory {
        /// The bytes asked for.
        bytes: u32,
        /// The kernel's maximum on the device.
        max: u32,
    },
    /// A cluster dimension of 0 or one that does not divide the grid's.
    #[error("cluster {axis} is {size}; it must be at least 1 and divide grid {axis} ({blocks})")]
    ClusterDivide {
        /// `'x'`, `'y'` or `'z'`.
        axis: char,
        /// The cluster's size on that axis.
        size: u32,
        /// The grid's blocks on that axis.
        blocks: u32,
    },
    /// A cluster of more blocks than the portable maximum.
    #[error("a cluster of {blocks} blocks is more than the portable maximum of 8")]
    ClusterSize {
        /// The cluster's blocks.
        blocks: u64,
    },
    /// A cooperative launch on a device that does not support them
    /// (`CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH` is 0).
    #[error("device {ordinal} does not support cooperative launches")]
    CooperativeUnsupported {
        /// The device of the launch's stream.
        ordinal: usize,
    },
    /// A cooperative launch of more blocks than can be resident at once: every block of a
    /// cooperative grid must run at the same time.
    #[error(
        "a cooperative grid of {blocks} blocks is more than the {max} that fit on the device at once ({per_sm} per multiprocessor x {multiprocessors} multiprocessors, for this kernel, block and shared memory)"
    )]
    CooperativeGrid {
        /// The blocks asked for.
        blocks: u64,
        /// The most that can be resident at once.
        max: u64,
        /// Active blocks per multiprocessor (`cuOccupancyMaxActiveBlocksPerMultiprocessor`).
        per_sm: u32,
        /// The device's multiprocessors.
        multiprocessors: u32,
    },
    /// An executable graph with a cooperative kernel node launched on a stream of a context
    /// (a green context) with fewer multiprocessors than the node's grid needs to be resident
    /// at once: checked at the capture against the capture's context, and again at each launch.
    #[error(
        "the graph has a cooperative kernel node whose grid needs {needs} multiprocessors to be resident at once; the stream's context has {multiprocessors}"
    )]
    CooperativeGraph {
        /// The multiprocessors the largest cooperative grid needs.
        needs: u32,
        /// The multiprocessors of the stream's context.
        multiprocessors: u32,
    },
    /// A one-dimensional launch over `elements` elements with `block` threads per block needs
    /// more blocks than grid x allows ([`LaunchConfig::for_elements`](crate::LaunchConfig::for_elements)).
    #[error(
        "{elements} elements at {block} threads per block need more than the {} blocks grid x allows",
        i32::MAX
    )]
    TooManyElements {
        /// The elements asked for.
        elements: usize,
        /// The threads per block.
        block: u32,
    },
}

/// What is wrong with a tensor map's description ([`Error::BadTensorMap`]), found at encode
/// time, before the driver is called.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TensorMapProblem {
    /// A rank outside what the map kind allows (1 to 5 tiled, 3 to 5 im2col).
    #[error("a rank of {rank} is outside {min}..={max}")]
    Rank {
        /// The rank asked for.
        rank: usize,
        /// The least the map kind allows.
        min: usize,
        /// The most the map kind allows.
        max: usize,
    },
    /// The lists of a description do not all have the rank's length.
    #[error("{what} has {len} entries, and the rank is {rank}")]
    Length {
        /// Which list.
        what: &'static str,
        /// Its entries.
        len: usize,
        /// The rank (the strides list has one entry fewer).
        rank: usize,
    },
    /// A global dimension of 0 or above 2^32.
    #[error("global dimension {axis} is {size}; it must be between 1 and 2^32")]
    Dimension {
        /// The dimension's index (0 is the innermost).
        axis: usize,
        /// Its size in elements.
        size: u64,
    },
    /// A global stride that is not a multiple of 16 bytes (32 with a 32-byte interleave), is
    /// 2^40 or more, or is smaller than the dimension below it spans.
    #[error(
        "global stride {axis} is {stride} bytes; it must be a multiple of {multiple}, below 2^40 and at least {at_least} (the extent of dimension {axis})"
    )]
    Stride {
        /// The stride's index (stride 0 separates elements of dimension 1).
        axis: usize,
        /// The stride in bytes.
        stride: u64,
        /// What it must be a multiple of.
        multiple: u64,
        /// The bytes that the dimensions below it span.
        at_least: u64,
    },
    /// A box dimension of 0 or above 256.
    #[error("box dimension {axis} is {size}; it must be between 1 and 256")]
    BoxDimension {
        /// The dimension's index.
        axis: usize,
        /// Its size in elements.
        size: u32,
    },
    /// The box's innermost dimension is not a multiple of 16 bytes, or is wider than the
    /// swizzle span.
    #[error(
        "the box's inner dimension is {bytes} bytes; it must be a multiple of 16 and at most {max}"
    )]
    BoxInner {
        /// Its width in bytes.
        bytes: u64,
        /// The most the swizzle mode allows.
        max: u64,
    },
    /// An element stride of 0 or above 8.
    #[error("element stride {axis} is {stride}; it must be between 1 and 8")]
    ElementStride {
        /// The dimension's index.
        axis: usize,
        /// The stride asked for.
        stride: u32,
    },
    /// A global address that is not 16-byte aligned (32-byte with a 32-byte interleave).
    #[error("the tensor's global address {address:#x} is not a multiple of {multiple}")]
    Alignment {
        /// The address.
        address: u64,
        /// What it must be a multiple of.
        multiple: u64,
    },
    /// The described tensor reaches past the end of its buffer.
    #[error("the tensor spans {needed} bytes, and its buffer holds {available}")]
    Extent {
        /// Bytes from the buffer's start to the end of the tensor's last element.
        needed: u64,
        /// Bytes in the buffer.
        available: u64,
    },
    /// NaN fill requested for an integer element type.
    #[error("NaN out-of-bounds fill needs a floating-point element type")]
    NanFill,
    /// An im2col pixel-box corner offset outside the range its rank allows
    /// ([-2^15, 2^15 - 1] at rank 3, [-2^7, 2^7 - 1] at rank 4, [-2^4, 2^4 - 1] at rank 5).
    #[error("{which} offset {axis} is {offset}; at this rank it must be within {min}..={max}")]
    Corner {
        /// Which corner: `"lower_corner"` or `"upper_corner"`.
        which: &'static str,
        /// The spatial dimension's index (0 is W, the one above the channels).
        axis: usize,
        /// The offset given.
        offset: i32,
        /// The least the rank allows.
        min: i32,
        /// The most the rank allows.
        max: i32,
    },
    /// An im2col bounding box that is empty along a spatial dimension: the dimension's size
    /// plus the upper corner's offset minus the lower corner's is below 1.
    #[error(
        "the pixel box is empty along spatial dimension {axis} (size plus upper minus lower offset is {size})"
    )]
    EmptyPixelBox {
        /// The spatial dimension's index (0 is W).
        axis: usize,
        /// The box's extent along it, in pixels.
        size: i64,
    },
    /// An im2col channel count per pixel of 0 or above 256.
    #[error("{channels} channels per pixel; it must be between 1 and 256")]
    ChannelsPerPixel {
        /// The count given.
        channels: u32,
    },
    /// An im2col pixel count per column of 0 or above 1024.
    #[error("{pixels} pixels per column; it must be between 1 and 1024")]
    PixelsPerColumn {
        /// The count given.
        pixels: u32,
    },
}

/// What an `errno` of [`Error::FdTake`] means there.
fn fd_take_reason(errno: i32) -> String {
    let meaning = match errno {
        libc::ENOSYS => "the kernel lacks pidfd_open or pidfd_getfd (Linux 5.6 or newer needed)",
        libc::EPERM => {
            "not permitted: taking a descriptor needs ptrace-attach rights over the process \
             (with Yama's ptrace_scope 1, only an ancestor, or a process the exporter named \
             with ipc::allow_fd_taking_by)"
        }
        libc::ESRCH => "no such process (it has exited)",
        libc::EBADF => "the process has no such descriptor open",
        libc::EINVAL => "not a valid process id",
        _ => "",
    };
    let os = std::io::Error::from_raw_os_error(errno);
    if meaning.is_empty() {
        os.to_string()
    } else {
        format!("{meaning} ({os})")
    }
}

/// The rules of graph-owned memory, node updates and forked captures that this crate checks
/// before calling the driver ([`Error::GraphRule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum GraphRule {
    /// Graph-owned memory was given to work outside its graph (a stream, a capture, a host
    /// copy, another library's reach check).
    #[error("graph-owned memory is usable only by nodes of the graph that allocates it")]
    OutsideGraph,
    /// Graph-owned memory was given to a node of another graph.
    #[error("this graph-owned memory belongs to graph {owner}, not to graph {graph}")]
    OtherGraph {
        /// The graph that allocates the memory.
        owner: u64,
        /// The graph it was given to.
        graph: u64,
    },
    /// A node using graph-owned memory does not depend, directly or through other nodes, on
    /// the memory's allocation node.
    #[error(
        "a node using graph-owned memory must depend, directly or transitively, on its allocation node"
    )]
    BeforeAlloc,
    /// A node using graph-owned memory was added after the memory's free node.
    #[error("graph-owned memory is used after its free node was added")]
    AfterFree,
    /// A free node does not depend, directly or through other nodes, on every node that uses
    /// the memory (and on its allocation node).
    #[error(
        "a free node must depend, directly or transitively, on the allocation node and every node using the memory"
    )]
    FreeBeforeUse,
    /// A second free node for the same memory, or a free of memory that is not the start of a
    /// graph-owned allocation (a view).
    #[error("graph-owned memory is freed once, by the whole allocation's handle")]
    BadFree,
    /// The graph has an allocation node without a free node: its memory would outlive the
    /// launch, and a second launch would fail.
    #[error("every allocation node needs a free node in the same graph before instantiation")]
    NotFreed,
    /// The graph has memory nodes and an executable graph made from it is still alive: the
    /// driver allows one instantiation at a time.
    #[error("a graph with memory nodes has at most one executable graph at a time")]
    SecondInstance,
    /// A whole-graph update of, or from, a graph with memory nodes.
    #[error(
        "an executable graph with memory nodes, or a graph with memory nodes, cannot be used in a whole-graph update"
    )]
    UpdateWithMemory,
    /// A node of the source graph added after the executable graph was instantiated from it:
    /// the executable graph has no such node.
    #[error("the node was added to its graph after this executable graph was instantiated")]
    NotInstantiated,
    /// A node update passes graph-owned memory that the node did not use when it was added.
    #[error(
        "a node update may pass only the graph-owned memory that the node used when it was added"
    )]
    NewGraphMemory,
    /// A graph with memory nodes given as a child graph: the driver refuses it.
    #[error("a graph with memory nodes cannot be a child graph")]
    MemoryInChild,
    /// A capture ended with forked branches that had work after their last join: they are
    /// joined back by the end of the capture (this is never returned for that), or a branch of
    /// another capture was joined.
    #[error("a branch can only be joined into the capture it was forked from")]
    ForeignBranch,
    /// A captured launch with a programmatic event (`LaunchOptions::programmatic_event`): the
    /// record of an event from outside the graph would make that event a fork point of the
    /// capture, through which other streams' work could join it unattached.
    #[error(
        "a launch with a programmatic event cannot be captured; use programmatic serialization, which becomes a programmatic edge of the graph"
    )]
    ProgrammaticEventInCapture,
    /// A conditional node reads a handle made with no default that no kernel node it depends
    /// on (in its own graph) takes as a parameter: nothing would define the condition, so every launch would
    /// read an undefined value (and a while node might never end). Give the handle a default
    /// (`GraphHandle::create_conditional(Some(..))`) or pass it to a kernel node that sets it.
    #[error(
        "a conditional node reads a handle with no default value that no kernel node before it sets"
    )]
    UndefinedCondition,
    /// Kernel nodes take a conditional handle that no conditional node reads: the driver gives
    /// such a set no meaning.
    #[error("kernel nodes set a conditional handle that no conditional node of the graph reads")]
    ConditionalNeverRead,
    /// A kernel node update that changes which conditional handles the node takes: the reading
    /// nodes were checked against the setters the graph had when it became executable.
    #[error("a kernel node update cannot change which conditional handles the node takes")]
    ConditionalSetterChanged,
    /// A switch node with no bodies (`ConditionalKind::Switch(0)`): it could run nothing.
    #[error("a switch node needs at least one body")]
    SwitchWithoutBodies,
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The driver status, for `Error::Driver`.
    pub fn code(&self) -> Option<CUresult> {
        match self {
            Error::Driver { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether this is the status the driver returns once it has shut down at process exit.
    pub fn is_deinitialized(&self) -> bool {
        self.code() == Some(CUresult::CUDA_ERROR_DEINITIALIZED)
    }

    /// Whether a stream capture refused the call (the stream, or one its work would join, is
    /// being captured): the call may succeed once the capture ended.
    pub(crate) fn is_capture_refusal(&self) -> bool {
        use CUresult::*;
        matches!(self, Error::Capturing | Error::OutsideCapture)
            || matches!(
                self.code(),
                Some(
                    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
                        | CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
                        | CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                        | CUDA_ERROR_STREAM_CAPTURE_ISOLATION
                        | CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
                )
            )
    }

    /// This error with `name` as its kernel, where it is a bounds-check error whose kernel is
    /// not named yet (a check names no kernel: the launch that ran it does).
    #[cold]
    pub(crate) fn for_kernel(mut self, name: &str) -> Error {
        if let Error::OutOfBounds { kernel, .. }
        | Error::SharedOutOfBounds { kernel, .. }
        | Error::BadCheck { kernel, .. } = &mut self
            && kernel.is_empty()
        {
            name.clone_into(kernel);
        }
        self
    }
}
