//! The C types of the driver API (CUDA 13.0 layouts, as cudarc's `sys` bindings declare them)
//! and the constants the simulator interprets.

use std::ffi::{c_char, c_void};

/// `CUresult`.
pub type CuResult = u32;
/// `CUdevice`.
pub type CuDevice = i32;
/// `CUdeviceptr`.
pub type CuDevicePtr = u64;
/// `CUmemGenericAllocationHandle`.
pub type MemHandle = u64;
/// Opaque handles (`CUcontext`, `CUstream`, `CUevent`, `CUmemoryPool`): pointer-sized values.
pub type Raw = usize;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemLocation {
    pub kind: u32,
    pub id: i32,
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemAccessDesc {
    pub location: MemLocation,
    pub flags: u32,
}

/// `CUmemPoolProps` (CUDA 12.6 to 13.1 layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemPoolProps {
    pub alloc_type: u32,
    pub handle_types: u32,
    pub location: MemLocation,
    pub win32_security_attributes: *mut c_void,
    pub max_size: usize,
    pub usage: u16,
    pub reserved: [u8; 54],
}

/// `CUmemPoolPtrExportData`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PoolPtrExportData {
    pub reserved: [u8; 64],
}

/// `CUipcEventHandle`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcEventHandle {
    pub reserved: [c_char; 64],
}

/// `CUhostFn`.
pub type HostFn = Option<unsafe extern "C" fn(*mut c_void)>;
/// `CUstreamCallback`.
pub type StreamCallback = Option<unsafe extern "C" fn(Raw, CuResult, *mut c_void)>;

pub const STREAM_LEGACY: Raw = 0x1;
pub const STREAM_PER_THREAD: Raw = 0x2;
pub const STREAM_NON_BLOCKING: u32 = 0x1;

pub const EVENT_BLOCKING_SYNC: u32 = 0x1;
pub const EVENT_DISABLE_TIMING: u32 = 0x2;
pub const EVENT_INTERPROCESS: u32 = 0x4;

pub const LOCATION_DEVICE: u32 = 1;
pub const LOCATION_HOST: u32 = 2;
pub const LOCATION_HOST_NUMA: u32 = 3;

pub const HANDLE_TYPE_NONE: u32 = 0;
pub const HANDLE_TYPE_POSIX_FD: u32 = 1;

pub const ACCESS_NONE: u32 = 0;
pub const ACCESS_READ: u32 = 1;
pub const ACCESS_READWRITE: u32 = 3;

pub const POOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: u32 = 1;
pub const POOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: u32 = 2;
pub const POOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: u32 = 3;
pub const POOL_ATTR_RELEASE_THRESHOLD: u32 = 4;
pub const POOL_ATTR_RESERVED_MEM_CURRENT: u32 = 5;
pub const POOL_ATTR_RESERVED_MEM_HIGH: u32 = 6;
pub const POOL_ATTR_USED_MEM_CURRENT: u32 = 7;
pub const POOL_ATTR_USED_MEM_HIGH: u32 = 8;

pub const POINTER_ATTR_CONTEXT: u32 = 1;
pub const POINTER_ATTR_MEMORY_TYPE: u32 = 2;
pub const POINTER_ATTR_DEVICE_POINTER: u32 = 3;
pub const POINTER_ATTR_HOST_POINTER: u32 = 4;
pub const POINTER_ATTR_IS_MANAGED: u32 = 8;
pub const POINTER_ATTR_DEVICE_ORDINAL: u32 = 9;
pub const POINTER_ATTR_RANGE_START_ADDR: u32 = 11;
pub const POINTER_ATTR_RANGE_SIZE: u32 = 12;
pub const POINTER_ATTR_MAPPED: u32 = 13;
pub const POINTER_ATTR_MEMPOOL_HANDLE: u32 = 17;

pub const MEMORY_TYPE_HOST: u32 = 1;
pub const MEMORY_TYPE_DEVICE: u32 = 2;

/// `CUlaunchAttribute`: an id and a 64-byte value union (8-byte aligned in C; read unaligned).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LaunchAttribute {
    pub id: u32,
    pub pad: [u8; 4],
    pub value: [u8; 64],
}

/// `CUlaunchConfig`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    pub stream: Raw,
    pub attrs: *mut LaunchAttribute,
    pub num_attrs: u32,
}

/// `CUDA_KERNEL_NODE_PARAMS` (the `_v2` layout of CUDA 12 and 13: `kern` and `ctx` at the end).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelNodeParams {
    pub func: Raw,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    pub kern: Raw,
    pub ctx: Raw,
}

/// `CUDA_HOST_NODE_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HostNodeParams {
    pub function: HostFn,
    pub data: *mut c_void,
}

/// `CUDA_MEMSET_NODE_PARAMS` (v1).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemsetNodeParams {
    pub dst: CuDevicePtr,
    pub pitch: usize,
    pub value: u32,
    pub element_size: u32,
    pub width: usize,
    pub height: usize,
}

/// `CUDA_MEMCPY3D`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memcpy3D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: u32,
    pub src_host: *const c_void,
    pub src_device: CuDevicePtr,
    pub src_array: Raw,
    pub reserved0: *mut c_void,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_memory_type: u32,
    pub dst_host: *mut c_void,
    pub dst_device: CuDevicePtr,
    pub dst_array: Raw,
    pub reserved1: *mut c_void,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_in_bytes: usize,
    pub height: usize,
    pub depth: usize,
}

/// `CUgraphExecUpdateResultInfo`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GraphExecUpdateResultInfo {
    pub result: u32,
    pub error_node: Raw,
    pub error_from_node: Raw,
}

pub const MEMORYTYPE_HOST: u32 = 1;
pub const MEMORYTYPE_DEVICE: u32 = 2;
pub const MEMORYTYPE_ARRAY: u32 = 3;
pub const MEMORYTYPE_UNIFIED: u32 = 4;

/// `CUmemAllocationProp` (CUDA 13.0 layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemAllocationProp {
    pub alloc_type: u32,
    pub handle_types: u32,
    pub location: MemLocation,
    pub win32_metadata: *mut c_void,
    pub compression: u8,
    pub rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

pub const ALLOCATION_TYPE_PINNED: u32 = 1;
pub const HANDLE_TYPE_WIN32: u32 = 2;
pub const HANDLE_TYPE_WIN32_KMT: u32 = 4;
pub const HANDLE_TYPE_FABRIC: u32 = 8;
pub const GRANULARITY_MINIMUM: u32 = 0;
pub const GRANULARITY_RECOMMENDED: u32 = 1;

/// `CUdevSmResource` (CUDA 13.0 layout).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DevSmResource {
    pub sm_count: u32,
    pub min_partition: u32,
    pub coscheduled_alignment: u32,
}

/// `CUdevResource` (CUDA 13.0 layout: type, 92 bytes the driver keeps for itself, then a
/// 48-byte union of which the simulator only uses the SM member).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DevResource {
    pub kind: u32,
    pub internal: [u8; 92],
    pub sm: DevSmResource,
    pub rest: [u8; 36],
}

pub const DEV_RESOURCE_TYPE_SM: u32 = 1;
pub const SM_SPLIT_IGNORE_SM_COSCHEDULING: u32 = 1;
pub const GREEN_CTX_DEFAULT_STREAM: u32 = 1;
