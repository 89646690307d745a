//! Every `CUresult` of the CUDA 13.0 headers, with its name and a short description.

/// `(code, name, description)`, each string NUL-terminated for the C callers.
pub static TABLE: &[(u32, &str, &str)] = &[
    (0, "CUDA_SUCCESS\0", "no error (cuda-sim)\0"),
    (
        1,
        "CUDA_ERROR_INVALID_VALUE\0",
        "invalid value (cuda-sim)\0",
    ),
    (
        2,
        "CUDA_ERROR_OUT_OF_MEMORY\0",
        "out of memory (cuda-sim)\0",
    ),
    (
        3,
        "CUDA_ERROR_NOT_INITIALIZED\0",
        "not initialized (cuda-sim)\0",
    ),
    (
        4,
        "CUDA_ERROR_DEINITIALIZED\0",
        "deinitialized (cuda-sim)\0",
    ),
    (
        5,
        "CUDA_ERROR_PROFILER_DISABLED\0",
        "profiler disabled (cuda-sim)\0",
    ),
    (
        6,
        "CUDA_ERROR_PROFILER_NOT_INITIALIZED\0",
        "profiler not initialized (cuda-sim)\0",
    ),
    (
        7,
        "CUDA_ERROR_PROFILER_ALREADY_STARTED\0",
        "profiler already started (cuda-sim)\0",
    ),
    (
        8,
        "CUDA_ERROR_PROFILER_ALREADY_STOPPED\0",
        "profiler already stopped (cuda-sim)\0",
    ),
    (34, "CUDA_ERROR_STUB_LIBRARY\0", "stub library (cuda-sim)\0"),
    (
        36,
        "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER\0",
        "call requires newer driver (cuda-sim)\0",
    ),
    (
        46,
        "CUDA_ERROR_DEVICE_UNAVAILABLE\0",
        "device unavailable (cuda-sim)\0",
    ),
    (100, "CUDA_ERROR_NO_DEVICE\0", "no device (cuda-sim)\0"),
    (
        101,
        "CUDA_ERROR_INVALID_DEVICE\0",
        "invalid device (cuda-sim)\0",
    ),
    (
        102,
        "CUDA_ERROR_DEVICE_NOT_LICENSED\0",
        "device not licensed (cuda-sim)\0",
    ),
    (
        200,
        "CUDA_ERROR_INVALID_IMAGE\0",
        "invalid image (cuda-sim)\0",
    ),
    (
        201,
        "CUDA_ERROR_INVALID_CONTEXT\0",
        "invalid context (cuda-sim)\0",
    ),
    (
        202,
        "CUDA_ERROR_CONTEXT_ALREADY_CURRENT\0",
        "context already current (cuda-sim)\0",
    ),
    (205, "CUDA_ERROR_MAP_FAILED\0", "map failed (cuda-sim)\0"),
    (
        206,
        "CUDA_ERROR_UNMAP_FAILED\0",
        "unmap failed (cuda-sim)\0",
    ),
    (
        207,
        "CUDA_ERROR_ARRAY_IS_MAPPED\0",
        "array is mapped (cuda-sim)\0",
    ),
    (
        208,
        "CUDA_ERROR_ALREADY_MAPPED\0",
        "already mapped (cuda-sim)\0",
    ),
    (
        209,
        "CUDA_ERROR_NO_BINARY_FOR_GPU\0",
        "no binary for gpu (cuda-sim)\0",
    ),
    (
        210,
        "CUDA_ERROR_ALREADY_ACQUIRED\0",
        "already acquired (cuda-sim)\0",
    ),
    (211, "CUDA_ERROR_NOT_MAPPED\0", "not mapped (cuda-sim)\0"),
    (
        212,
        "CUDA_ERROR_NOT_MAPPED_AS_ARRAY\0",
        "not mapped as array (cuda-sim)\0",
    ),
    (
        213,
        "CUDA_ERROR_NOT_MAPPED_AS_POINTER\0",
        "not mapped as pointer (cuda-sim)\0",
    ),
    (
        214,
        "CUDA_ERROR_ECC_UNCORRECTABLE\0",
        "ecc uncorrectable (cuda-sim)\0",
    ),
    (
        215,
        "CUDA_ERROR_UNSUPPORTED_LIMIT\0",
        "unsupported limit (cuda-sim)\0",
    ),
    (
        216,
        "CUDA_ERROR_CONTEXT_ALREADY_IN_USE\0",
        "context already in use (cuda-sim)\0",
    ),
    (
        217,
        "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED\0",
        "peer access unsupported (cuda-sim)\0",
    ),
    (218, "CUDA_ERROR_INVALID_PTX\0", "invalid ptx (cuda-sim)\0"),
    (
        219,
        "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT\0",
        "invalid graphics context (cuda-sim)\0",
    ),
    (
        220,
        "CUDA_ERROR_NVLINK_UNCORRECTABLE\0",
        "nvlink uncorrectable (cuda-sim)\0",
    ),
    (
        221,
        "CUDA_ERROR_JIT_COMPILER_NOT_FOUND\0",
        "jit compiler not found (cuda-sim)\0",
    ),
    (
        222,
        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION\0",
        "unsupported ptx version (cuda-sim)\0",
    ),
    (
        223,
        "CUDA_ERROR_JIT_COMPILATION_DISABLED\0",
        "jit compilation disabled (cuda-sim)\0",
    ),
    (
        224,
        "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY\0",
        "unsupported exec affinity (cuda-sim)\0",
    ),
    (
        225,
        "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC\0",
        "unsupported devside sync (cuda-sim)\0",
    ),
    (226, "CUDA_ERROR_CONTAINED\0", "contained (cuda-sim)\0"),
    (
        300,
        "CUDA_ERROR_INVALID_SOURCE\0",
        "invalid source (cuda-sim)\0",
    ),
    (
        301,
        "CUDA_ERROR_FILE_NOT_FOUND\0",
        "file not found (cuda-sim)\0",
    ),
    (
        302,
        "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND\0",
        "shared object symbol not found (cuda-sim)\0",
    ),
    (
        303,
        "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED\0",
        "shared object init failed (cuda-sim)\0",
    ),
    (
        304,
        "CUDA_ERROR_OPERATING_SYSTEM\0",
        "operating system (cuda-sim)\0",
    ),
    (
        400,
        "CUDA_ERROR_INVALID_HANDLE\0",
        "invalid handle (cuda-sim)\0",
    ),
    (
        401,
        "CUDA_ERROR_ILLEGAL_STATE\0",
        "illegal state (cuda-sim)\0",
    ),
    (402, "CUDA_ERROR_LOSSY_QUERY\0", "lossy query (cuda-sim)\0"),
    (500, "CUDA_ERROR_NOT_FOUND\0", "not found (cuda-sim)\0"),
    (600, "CUDA_ERROR_NOT_READY\0", "not ready (cuda-sim)\0"),
    (
        700,
        "CUDA_ERROR_ILLEGAL_ADDRESS\0",
        "illegal address (cuda-sim)\0",
    ),
    (
        701,
        "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES\0",
        "launch out of resources (cuda-sim)\0",
    ),
    (
        702,
        "CUDA_ERROR_LAUNCH_TIMEOUT\0",
        "launch timeout (cuda-sim)\0",
    ),
    (
        703,
        "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING\0",
        "launch incompatible texturing (cuda-sim)\0",
    ),
    (
        704,
        "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED\0",
        "peer access already enabled (cuda-sim)\0",
    ),
    (
        705,
        "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED\0",
        "peer access not enabled (cuda-sim)\0",
    ),
    (
        708,
        "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE\0",
        "primary context active (cuda-sim)\0",
    ),
    (
        709,
        "CUDA_ERROR_CONTEXT_IS_DESTROYED\0",
        "context is destroyed (cuda-sim)\0",
    ),
    (710, "CUDA_ERROR_ASSERT\0", "assert (cuda-sim)\0"),
    (
        711,
        "CUDA_ERROR_TOO_MANY_PEERS\0",
        "too many peers (cuda-sim)\0",
    ),
    (
        712,
        "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED\0",
        "host memory already registered (cuda-sim)\0",
    ),
    (
        713,
        "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED\0",
        "host memory not registered (cuda-sim)\0",
    ),
    (
        714,
        "CUDA_ERROR_HARDWARE_STACK_ERROR\0",
        "hardware stack error (cuda-sim)\0",
    ),
    (
        715,
        "CUDA_ERROR_ILLEGAL_INSTRUCTION\0",
        "illegal instruction (cuda-sim)\0",
    ),
    (
        716,
        "CUDA_ERROR_MISALIGNED_ADDRESS\0",
        "misaligned address (cuda-sim)\0",
    ),
    (
        717,
        "CUDA_ERROR_INVALID_ADDRESS_SPACE\0",
        "invalid address space (cuda-sim)\0",
    ),
    (718, "CUDA_ERROR_INVALID_PC\0", "invalid pc (cuda-sim)\0"),
    (
        719,
        "CUDA_ERROR_LAUNCH_FAILED\0",
        "launch failed (cuda-sim)\0",
    ),
    (
        720,
        "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE\0",
        "cooperative launch too large (cuda-sim)\0",
    ),
    (
        721,
        "CUDA_ERROR_TENSOR_MEMORY_LEAK\0",
        "tensor memory leak (cuda-sim)\0",
    ),
    (
        800,
        "CUDA_ERROR_NOT_PERMITTED\0",
        "not permitted (cuda-sim)\0",
    ),
    (
        801,
        "CUDA_ERROR_NOT_SUPPORTED\0",
        "not supported (cuda-sim)\0",
    ),
    (
        802,
        "CUDA_ERROR_SYSTEM_NOT_READY\0",
        "system not ready (cuda-sim)\0",
    ),
    (
        803,
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH\0",
        "system driver mismatch (cuda-sim)\0",
    ),
    (
        804,
        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE\0",
        "compat not supported on device (cuda-sim)\0",
    ),
    (
        805,
        "CUDA_ERROR_MPS_CONNECTION_FAILED\0",
        "mps connection failed (cuda-sim)\0",
    ),
    (
        806,
        "CUDA_ERROR_MPS_RPC_FAILURE\0",
        "mps rpc failure (cuda-sim)\0",
    ),
    (
        807,
        "CUDA_ERROR_MPS_SERVER_NOT_READY\0",
        "mps server not ready (cuda-sim)\0",
    ),
    (
        808,
        "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED\0",
        "mps max clients reached (cuda-sim)\0",
    ),
    (
        809,
        "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED\0",
        "mps max connections reached (cuda-sim)\0",
    ),
    (
        810,
        "CUDA_ERROR_MPS_CLIENT_TERMINATED\0",
        "mps client terminated (cuda-sim)\0",
    ),
    (
        811,
        "CUDA_ERROR_CDP_NOT_SUPPORTED\0",
        "cdp not supported (cuda-sim)\0",
    ),
    (
        812,
        "CUDA_ERROR_CDP_VERSION_MISMATCH\0",
        "cdp version mismatch (cuda-sim)\0",
    ),
    (
        900,
        "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED\0",
        "stream capture unsupported (cuda-sim)\0",
    ),
    (
        901,
        "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED\0",
        "stream capture invalidated (cuda-sim)\0",
    ),
    (
        902,
        "CUDA_ERROR_STREAM_CAPTURE_MERGE\0",
        "stream capture merge (cuda-sim)\0",
    ),
    (
        903,
        "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED\0",
        "stream capture unmatched (cuda-sim)\0",
    ),
    (
        904,
        "CUDA_ERROR_STREAM_CAPTURE_UNJOINED\0",
        "stream capture unjoined (cuda-sim)\0",
    ),
    (
        905,
        "CUDA_ERROR_STREAM_CAPTURE_ISOLATION\0",
        "stream capture isolation (cuda-sim)\0",
    ),
    (
        906,
        "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT\0",
        "stream capture implicit (cuda-sim)\0",
    ),
    (
        907,
        "CUDA_ERROR_CAPTURED_EVENT\0",
        "captured event (cuda-sim)\0",
    ),
    (
        908,
        "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD\0",
        "stream capture wrong thread (cuda-sim)\0",
    ),
    (909, "CUDA_ERROR_TIMEOUT\0", "timeout (cuda-sim)\0"),
    (
        910,
        "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE\0",
        "graph exec update failure (cuda-sim)\0",
    ),
    (
        911,
        "CUDA_ERROR_EXTERNAL_DEVICE\0",
        "external device (cuda-sim)\0",
    ),
    (
        912,
        "CUDA_ERROR_INVALID_CLUSTER_SIZE\0",
        "invalid cluster size (cuda-sim)\0",
    ),
    (
        913,
        "CUDA_ERROR_FUNCTION_NOT_LOADED\0",
        "function not loaded (cuda-sim)\0",
    ),
    (
        914,
        "CUDA_ERROR_INVALID_RESOURCE_TYPE\0",
        "invalid resource type (cuda-sim)\0",
    ),
    (
        915,
        "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION\0",
        "invalid resource configuration (cuda-sim)\0",
    ),
    (
        916,
        "CUDA_ERROR_KEY_ROTATION\0",
        "key rotation (cuda-sim)\0",
    ),
    (999, "CUDA_ERROR_UNKNOWN\0", "unknown (cuda-sim)\0"),
];

/// The code named `name` (without NUL), for `CUDA_SIM_FAIL`.
pub fn code_of(name: &str) -> Option<u32> {
    TABLE
        .iter()
        .find(|(_, entry, _)| entry.strip_suffix('\0') == Some(name))
        .map(|(code, _, _)| *code)
}

/// The entry of `code`, if it is a known status.
pub fn entry(code: u32) -> Option<&'static (u32, &'static str, &'static str)> {
    TABLE.iter().find(|(known, _, _)| *known == code)
}

/// The name of `code` without the NUL, or `"CUDA_ERROR_UNKNOWN"` for codes outside the table.
pub fn name(code: u32) -> &'static str {
    entry(code).map_or("CUDA_ERROR_UNKNOWN", |(_, name, _)| {
        name.trim_end_matches('\0')
    })
}

pub const SUCCESS: u32 = 0;
pub const INVALID_VALUE: u32 = 1;
pub const OUT_OF_MEMORY: u32 = 2;
pub const NOT_INITIALIZED: u32 = 3;
pub const DEINITIALIZED: u32 = 4;
pub const NO_DEVICE: u32 = 100;
pub const INVALID_DEVICE: u32 = 101;
pub const INVALID_CONTEXT: u32 = 201;
pub const ALREADY_MAPPED: u32 = 208;
pub const INVALID_HANDLE: u32 = 400;
pub const NOT_FOUND: u32 = 500;
pub const NOT_READY: u32 = 600;
pub const CONTEXT_IS_DESTROYED: u32 = 709;
pub const NOT_PERMITTED: u32 = 800;
pub const NOT_SUPPORTED: u32 = 801;
pub const OPERATING_SYSTEM: u32 = 304;
