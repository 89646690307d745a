//! Devices and their properties: name, UUID, compute capability, memory, PCI location and
//! every attribute the driver reports, read once per device and cached for the process.
//!
//! A [`Device`] is an ordinal checked against the machine's devices. Its first
//! [`properties`](Device::properties) call reads everything (one `cuDeviceGetAttribute` per
//! attribute, plus the name, UUID, total memory and PCI bus id); later calls, from any thread
//! and through any `Device` of the same ordinal, return the same `&'static` record with no
//! driver call. An attribute the driver does not know (an older driver answers
//! `CUDA_ERROR_INVALID_VALUE`) is `None`; any other failure is an `Err`, and nothing is cached,
//! so a later call reads again.

use std::fmt;
use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUdevice_attribute as A, CUresult};

use crate::driver::call::{driver, out};
use crate::driver::load::{self, device_count};
use crate::error::{Error, Result};

/// A CUDA device of this machine, by ordinal (`0..device_count()`).
///
/// Cheap to copy; everything it reports comes from the process-wide cache that its first
/// [`properties`](Device::properties) call fills.
///
/// ```no_run
/// use handles_cuda::exec::Device;
///
/// # fn main() -> handles_cuda::Result<()> {
/// let device = Device::new(0)?;
/// let properties = device.properties()?;
/// println!("{} ({}), sm_{}, {} SMs", properties.name, properties.uuid, properties.arch,
///          properties.multiprocessor_count);
/// assert_eq!(properties.arch, format!("{}{}", properties.compute_capability.0,
///                                     properties.compute_capability.1));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    ordinal: usize,
    raw: sys::CUdevice,
}

impl Device {
    /// Device `ordinal`, or [`Error::NoSuchDevice`] if the machine has no such device.
    pub fn new(ordinal: usize) -> Result<Device> {
        let raw = load::device(ordinal)?;
        Ok(Device { ordinal, raw })
    }

    /// Every device of this machine, in ordinal order.
    pub fn all() -> Result<Vec<Device>> {
        (0..device_count()?).map(Device::new).collect()
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The driver's `CUdevice` for this device.
    pub fn as_cu(&self) -> sys::CUdevice {
        self.raw
    }

    /// Everything the driver reports about the device, read on the first call for this
    /// ordinal and cached for the process: later calls make no driver call and return the
    /// same record.
    ///
    /// # Errors
    ///
    /// A driver failure of any query other than an attribute the driver does not know (which
    /// is `None` in the record). Nothing is cached then: the next call reads again.
    pub fn properties(&self) -> Result<&'static DeviceProperties> {
        static CACHE: OnceLock<Box<[OnceLock<DeviceProperties>]>> = OnceLock::new();
        let cache = match CACHE.get() {
            Some(cache) => cache,
            None => {
                let count = device_count()?;
                CACHE.get_or_init(|| (0..count).map(|_| OnceLock::new()).collect())
            }
        };
        let slot = cache.get(self.ordinal).ok_or(Error::NoSuchDevice {
            ordinal: self.ordinal,
            count: cache.len(),
        })?;
        if let Some(properties) = slot.get() {
            return Ok(properties);
        }
        // Two threads may both read on a first call; one record wins, both return it.
        let read = DeviceProperties::read(self.raw)?;
        Ok(slot.get_or_init(|| read))
    }

    /// The device's name ("NVIDIA H200"), from the cached properties.
    pub fn name(&self) -> Result<&'static str> {
        Ok(&self.properties()?.name)
    }

    /// The device's UUID, from the cached properties.
    pub fn uuid(&self) -> Result<DeviceUuid> {
        Ok(self.properties()?.uuid)
    }

    /// The compute capability, (major, minor), from the cached properties.
    pub fn compute_capability(&self) -> Result<(u32, u32)> {
        Ok(self.properties()?.compute_capability)
    }

    /// The architecture as compilers name it: major and minor run together ("90" for an
    /// H100 or H200, as in `sm_90`), from the cached properties.
    pub fn arch(&self) -> Result<&'static str> {
        Ok(&self.properties()?.arch)
    }
}

/// A device's UUID: 16 bytes, shown as `nvidia-smi -L` shows it
/// (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceUuid(pub [u8; 16]);

impl DeviceUuid {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Whether every byte is zero (no UUID).
    pub fn is_nil(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Display for DeviceUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GPU-")?;
        for (i, byte) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for DeviceUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceUuid({self})")
    }
}

/// Where a device sits on the PCI bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciLocation {
    /// The PCI domain (segment).
    pub domain: u32,
    /// The bus.
    pub bus: u32,
    /// The device on the bus.
    pub device: u32,
}

impl PciLocation {
    /// Parses a PCI bus id such as `cuDeviceGetPCIBusId` writes, `domain:bus:device.function`
    /// in hexadecimal (`0000:18:00.0`; nvidia-smi's eight-digit domain parses too). The
    /// function is not kept. `None` if the text has another form.
    pub fn parse(bus_id: &str) -> Option<PciLocation> {
        let mut parts = bus_id.trim().split(':');
        let (domain, bus, rest) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let (device, function) = rest.split_once('.')?;
        let hex = |text: &str| {
            (!text.is_empty() && text.len() <= 8)
                .then(|| u32::from_str_radix(text, 16).ok())
                .flatten()
        };
        hex(function)?;
        Some(PciLocation {
            domain: hex(domain)?,
            bus: hex(bus)?,
            device: hex(device)?,
        })
    }
}

impl fmt::Display for PciLocation {
    /// `domain:bus:device`, as in a bus id without its function (`0000:18:00`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}",
            self.domain, self.bus, self.device
        )
    }
}

/// How an attribute's `int` becomes a field.
trait FromAttribute: Sized {
    fn from_attribute(value: i32) -> Self;
}

impl FromAttribute for bool {
    fn from_attribute(value: i32) -> bool {
        value != 0
    }
}

impl FromAttribute for i32 {
    fn from_attribute(value: i32) -> i32 {
        value
    }
}

/// One attribute: `None` where the driver does not know it (`CUDA_ERROR_INVALID_VALUE`).
fn attribute<T: FromAttribute>(device: sys::CUdevice, attribute: A) -> Result<Option<T>> {
    let mut value = 0;
    // SAFETY: the driver is loaded (the device was checked), `device` is one of its devices,
    // and `value` is a valid out-pointer.
    match unsafe { driver!(cuDeviceGetAttribute(&mut value, attribute, device)) } {
        Ok(()) => Ok(Some(T::from_attribute(value))),
        Err(error) if error.code() == Some(CUresult::CUDA_ERROR_INVALID_VALUE) => Ok(None),
        Err(error) => Err(error),
    }
}

/// One attribute every supported driver has (CUDA 12.0 knows it): unknown is an anomaly.
fn required(device: sys::CUdevice, which: A, what: &str) -> Result<i32> {
    attribute(device, which)?.ok_or_else(|| Error::DriverAnomaly {
        call: "cuDeviceGetAttribute",
        what: format!("the device's {what} is unknown to the driver"),
    })
}

/// A NUL-terminated string the driver writes into a buffer (`cuDeviceGetName`,
/// `cuDeviceGetPCIBusId`).
fn driver_string(
    call: &'static str,
    fill: impl FnOnce(*mut std::ffi::c_char, i32) -> Result<()>,
) -> Result<String> {
    let mut buffer = [0u8; 256];
    fill(buffer.as_mut_ptr().cast(), buffer.len() as i32)?;
    let end = buffer
        .iter()
        .position(|&byte| byte == 0)
        .ok_or_else(|| Error::DriverAnomaly {
            call,
            what: "a string with no NUL in 256 bytes".into(),
        })?;
    Ok(String::from_utf8_lossy(&buffer[..end]).into_owned())
}

macro_rules! device_properties {
    (
        $( $(#[doc = $doc:literal])+ $field:ident: $kind:ident = $variant:ident $(if $cfg:meta)?; )*
    ) => {
        /// Everything the driver reports about a device, as [`Device::properties`] reads it.
        ///
        /// The first fields are what every driver reports; the rest are one per
        /// `CUdevice_attribute` (the list of cuda.core's `DeviceProperties`, named after the
        /// attribute: `CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE` is `l2_cache_size`), `None` where
        /// the driver does not know the attribute (older drivers, and attributes newer than
        /// the CUDA headers this crate was built with). Flags are `bool`; sizes are in bytes,
        /// clock rates in kHz, as the driver reports them.
        #[derive(Debug, Clone, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct DeviceProperties {
            /// The device's name (`cuDeviceGetName`).
            pub name: String,
            /// The device's UUID (`cuDeviceGetUuid_v2`).
            pub uuid: DeviceUuid,
            /// The compute capability, (major, minor).
            pub compute_capability: (u32, u32),
            /// The architecture: major and minor run together ("90").
            pub arch: String,
            /// Streaming multiprocessors.
            pub multiprocessor_count: u32,
            /// Device memory in bytes (`cuDeviceTotalMem`).
            pub total_memory: usize,
            /// Where the device sits on the PCI bus.
            pub pci: PciLocation,
            /// The PCI bus id as the driver writes it (`cuDeviceGetPCIBusId`, `0000:18:00.0`).
            pub pci_bus_id: String,
            $( $(#[doc = $doc])+ pub $field: Option<$kind>, )*
        }

        impl DeviceProperties {
            fn read(device: sys::CUdevice) -> Result<DeviceProperties> {
                let major = required(device, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability")?;
                let minor = required(device, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability")?;
                let count = |value: i32, what: &str| {
                    u32::try_from(value).map_err(|_| Error::DriverAnomaly {
                        call: "cuDeviceGetAttribute",
                        what: format!("a negative {what}: {value}"),
                    })
                };
                let compute_capability = (count(major, "compute capability")?, count(minor, "compute capability")?);
                let multiprocessor_count = count(
                    required(device, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count")?,
                    "SM count",
                )?;
                let pci = PciLocation {
                    domain: count(required(device, A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, "PCI domain")?, "PCI domain")?,
                    bus: count(required(device, A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, "PCI bus")?, "PCI bus")?,
                    device: count(required(device, A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, "PCI device")?, "PCI device")?,
                };
                let name = driver_string("cuDeviceGetName", |buffer, len| {
                    // SAFETY: `buffer` holds `len` bytes; the driver writes at most that many,
                    // NUL included.
                    unsafe { driver!(cuDeviceGetName(buffer, len, device)) }
                })?;
                let pci_bus_id = driver_string("cuDeviceGetPCIBusId", |buffer, len| {
                    // SAFETY: as above.
                    unsafe { driver!(cuDeviceGetPCIBusId(buffer, len, device)) }
                })?;
                let mut uuid = sys::CUuuid { bytes: [0; 16] };
                // SAFETY: `uuid` is a valid out-pointer to a CUuuid.
                unsafe { driver!(cuDeviceGetUuid_v2(&mut uuid, device)) }?;
                // SAFETY: a valid out-pointer.
                let total_memory = out(|bytes| unsafe { driver!(cuDeviceTotalMem_v2(bytes, device)) })?;
                Ok(DeviceProperties {
                    name,
                    uuid: DeviceUuid(uuid.bytes.map(|byte| byte as u8)),
                    arch: format!("{}{}", compute_capability.0, compute_capability.1),
                    compute_capability,
                    multiprocessor_count,
                    total_memory,
                    pci,
                    pci_bus_id,
                    $( $field: {
                        $( #[cfg(not($cfg))] let value: Option<$kind> = None; )?
                        $( #[cfg($cfg)] )?
                        let value = attribute(device, A::$variant)?;
                        value
                    }, )*
                })
            }

            /// The attribute fields the driver did not know, by name.
            pub fn unknown_attributes(&self) -> Vec<&'static str> {
                let mut unknown = Vec::new();
                $( if self.$field.is_none() { unknown.push(stringify!($field)); } )*
                unknown
            }
        }
    };
}

device_properties! {
    /// Most threads in a block.
    max_threads_per_block: i32 = CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
    /// Largest block dimension x.
    max_block_dim_x: i32 = CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X;
    /// Largest block dimension y.
    max_block_dim_y: i32 = CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y;
    /// Largest block dimension z.
    max_block_dim_z: i32 = CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z;
    /// Largest grid dimension x.
    max_grid_dim_x: i32 = CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X;
    /// Largest grid dimension y.
    max_grid_dim_y: i32 = CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y;
    /// Largest grid dimension z.
    max_grid_dim_z: i32 = CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z;
    /// Shared memory a block may use without opting in, in bytes.
    max_shared_memory_per_block: i32 = CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK;
    /// Constant memory, in bytes.
    total_constant_memory: i32 = CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY;
    /// Threads in a warp.
    warp_size: i32 = CU_DEVICE_ATTRIBUTE_WARP_SIZE;
    /// Largest pitch of a pitched copy, in bytes.
    max_pitch: i32 = CU_DEVICE_ATTRIBUTE_MAX_PITCH;
    /// 32-bit registers available to a block.
    max_registers_per_block: i32 = CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK;
    /// Typical SM clock, in kHz.
    clock_rate: i32 = CU_DEVICE_ATTRIBUTE_CLOCK_RATE;
    /// Alignment of texture base addresses, in bytes.
    texture_alignment: i32 = CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT;
    /// Can copy and compute at once (superseded by `async_engine_count`).
    gpu_overlap: bool = CU_DEVICE_ATTRIBUTE_GPU_OVERLAP;
    /// Kernels have a run-time limit (a display is attached).
    kernel_exec_timeout: bool = CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT;
    /// Integrated with host memory (not a discrete GPU).
    integrated: bool = CU_DEVICE_ATTRIBUTE_INTEGRATED;
    /// Can map host memory into the device's address space.
    can_map_host_memory: bool = CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY;
    /// The compute mode (0 default, 2 prohibited, 3 exclusive process).
    compute_mode: i32 = CU_DEVICE_ATTRIBUTE_COMPUTE_MODE;
    /// Largest 1-D texture width.
    maximum_texture1d_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH;
    /// Largest 2-D texture width.
    maximum_texture2d_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH;
    /// Largest 2-D texture height.
    maximum_texture2d_height: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT;
    /// Largest 3-D texture width.
    maximum_texture3d_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH;
    /// Largest 3-D texture height.
    maximum_texture3d_height: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT;
    /// Largest 3-D texture depth.
    maximum_texture3d_depth: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH;
    /// Largest layered 2-D texture width.
    maximum_texture2d_layered_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH;
    /// Largest layered 2-D texture height.
    maximum_texture2d_layered_height: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT;
    /// Most layers of a layered 2-D texture.
    maximum_texture2d_layered_layers: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS;
    /// Alignment of surfaces, in bytes.
    surface_alignment: i32 = CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT;
    /// Can run several kernels at once.
    concurrent_kernels: bool = CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS;
    /// ECC is on.
    ecc_enabled: bool = CU_DEVICE_ATTRIBUTE_ECC_ENABLED;
    /// Runs the TCC driver model (Windows).
    tcc_driver: bool = CU_DEVICE_ATTRIBUTE_TCC_DRIVER;
    /// Peak memory clock, in kHz.
    memory_clock_rate: i32 = CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE;
    /// Memory bus width, in bits.
    global_memory_bus_width: i32 = CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH;
    /// L2 cache, in bytes.
    l2_cache_size: i32 = CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE;
    /// Most resident threads on an SM.
    max_threads_per_multiprocessor: i32 = CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR;
    /// Copy engines that run alongside kernels.
    async_engine_count: i32 = CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT;
    /// Shares one address space with the host (unified addressing).
    unified_addressing: bool = CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING;
    /// Largest layered 1-D texture width.
    maximum_texture1d_layered_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH;
    /// Most layers of a layered 1-D texture.
    maximum_texture1d_layered_layers: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS;
    /// Supports 2-D texture gathers.
    can_tex2d_gather: bool = CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER;
    /// Largest 2-D gather texture width.
    maximum_texture2d_gather_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH;
    /// Largest 2-D gather texture height.
    maximum_texture2d_gather_height: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT;
    /// Alternate largest 3-D texture width.
    maximum_texture3d_width_alternate: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE;
    /// Alternate largest 3-D texture height.
    maximum_texture3d_height_alternate: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE;
    /// Alternate largest 3-D texture depth.
    maximum_texture3d_depth_alternate: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE;
    /// Pitch alignment of 2-D textures bound to pitched memory, in bytes.
    texture_pitch_alignment: i32 = CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT;
    /// Largest cubemap texture width.
    maximum_texturecubemap_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH;
    /// Largest layered cubemap texture width.
    maximum_texturecubemap_layered_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH;
    /// Most layers of a layered cubemap texture.
    maximum_texturecubemap_layered_layers: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS;
    /// Largest 1-D surface width.
    maximum_surface1d_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH;
    /// Largest 2-D surface width.
    maximum_surface2d_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH;
    /// Largest 2-D surface height.
    maximum_surface2d_height: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT;
    /// Largest 3-D surface width.
    maximum_surface3d_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH;
    /// Largest 3-D surface height.
    maximum_surface3d_height: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT;
    /// Largest 3-D surface depth.
    maximum_surface3d_depth: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH;
    /// Largest layered 1-D surface width.
    maximum_surface1d_layered_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH;
    /// Most layers of a layered 1-D surface.
    maximum_surface1d_layered_layers: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS;
    /// Largest layered 2-D surface width.
    maximum_surface2d_layered_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH;
    /// Largest layered 2-D surface height.
    maximum_surface2d_layered_height: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT;
    /// Most layers of a layered 2-D surface.
    maximum_surface2d_layered_layers: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS;
    /// Largest cubemap surface width.
    maximum_surfacecubemap_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH;
    /// Largest layered cubemap surface width.
    maximum_surfacecubemap_layered_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH;
    /// Most layers of a layered cubemap surface.
    maximum_surfacecubemap_layered_layers: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS;
    /// Largest 1-D texture bound to linear memory.
    maximum_texture1d_linear_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH;
    /// Largest width of a 2-D texture bound to linear memory.
    maximum_texture2d_linear_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH;
    /// Largest height of a 2-D texture bound to linear memory.
    maximum_texture2d_linear_height: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT;
    /// Largest pitch of a 2-D texture bound to linear memory, in bytes.
    maximum_texture2d_linear_pitch: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH;
    /// Largest mipmapped 2-D texture width.
    maximum_texture2d_mipmapped_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH;
    /// Largest mipmapped 2-D texture height.
    maximum_texture2d_mipmapped_height: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT;
    /// Largest mipmapped 1-D texture width.
    maximum_texture1d_mipmapped_width: i32 = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH;
    /// Streams can have priorities.
    stream_priorities_supported: bool = CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED;
    /// Global memory is cached in L1.
    global_l1_cache_supported: bool = CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED;
    /// Local memory is cached in L1.
    local_l1_cache_supported: bool = CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED;
    /// Shared memory of an SM, in bytes.
    max_shared_memory_per_multiprocessor: i32 = CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR;
    /// 32-bit registers of an SM.
    max_registers_per_multiprocessor: i32 = CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR;
    /// Can allocate managed memory.
    managed_memory: bool = CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY;
    /// On a multi-GPU board.
    multi_gpu_board: bool = CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD;
    /// The board's group id, shared by the GPUs of one board.
    multi_gpu_board_group_id: i32 = CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID;
    /// The link to the host supports native atomics.
    host_native_atomic_supported: bool = CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED;
    /// Single- to double-precision throughput ratio.
    single_to_double_precision_perf_ratio: i32 = CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO;
    /// Can access pageable host memory without registering it.
    pageable_memory_access: bool = CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS;
    /// Can access managed memory while the host does.
    concurrent_managed_access: bool = CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS;
    /// Supports compute preemption.
    compute_preemption_supported: bool = CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED;
    /// Can use host pointers of registered memory directly.
    can_use_host_pointer_for_registered_mem: bool = CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM;
    /// Supports cooperative launches.
    cooperative_launch: bool = CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH;
    /// Supported cooperative multi-device launches (deprecated by the driver).
    cooperative_multi_device_launch: bool = CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH;
    /// Shared memory a block may use after opting in, in bytes.
    max_shared_memory_per_block_optin: i32 = CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN;
    /// Supports flushing outstanding remote writes.
    can_flush_remote_writes: bool = CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES;
    /// Supports registering host memory (`cuMemHostRegister`).
    host_register_supported: bool = CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED;
    /// Accesses pageable memory through the host's page tables.
    pageable_memory_access_uses_host_page_tables: bool = CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES;
    /// The host can access managed memory directly, without migration.
    direct_managed_mem_access_from_host: bool = CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST;
    /// Supports virtual memory management (`cuMemCreate`, `cuMemMap`).
    virtual_memory_management_supported: bool = CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED;
    /// Physical allocations can be exported as POSIX descriptors.
    handle_type_posix_file_descriptor_supported: bool = CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED;
    /// Physical allocations can be exported as Win32 handles.
    handle_type_win32_handle_supported: bool = CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED;
    /// Physical allocations can be exported as Win32 KMT handles.
    handle_type_win32_kmt_handle_supported: bool = CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED;
    /// Most resident blocks on an SM.
    max_blocks_per_multiprocessor: i32 = CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR;
    /// Supports compressible memory.
    generic_compression_supported: bool = CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED;
    /// Largest persisting L2 cache, in bytes.
    max_persisting_l2_cache_size: i32 = CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE;
    /// Largest access policy window, in bytes.
    max_access_policy_window_size: i32 = CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE;
    /// Supports GPUDirect RDMA on virtual-memory allocations.
    gpu_direct_rdma_with_cuda_vmm_supported: bool = CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED;
    /// Shared memory the system reserves per block, in bytes.
    reserved_shared_memory_per_block: i32 = CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK;
    /// Supports sparse arrays.
    sparse_cuda_array_supported: bool = CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED;
    /// Can register host memory read-only.
    read_only_host_register_supported: bool = CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED;
    /// Supports timeline semaphore interop.
    timeline_semaphore_interop_supported: bool = CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED;
    /// Supports stream-ordered memory pools.
    memory_pools_supported: bool = CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED;
    /// Supports GPUDirect RDMA.
    gpu_direct_rdma_supported: bool = CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED;
    /// GPUDirect RDMA flush options (a bit mask of `CUflushGPUDirectRDMAWritesOptions`).
    gpu_direct_rdma_flush_writes_options: i32 = CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS;
    /// The ordering of GPUDirect RDMA writes (`CUGPUDirectRDMAWritesOrdering`).
    gpu_direct_rdma_writes_ordering: i32 = CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING;
    /// The handle types a memory pool can export (a bit mask of `CUmemAllocationHandleType`:
    /// 1 POSIX descriptor, 8 fabric).
    mempool_supported_handle_types: i32 = CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES;
    /// Supports thread-block clusters.
    cluster_launch: bool = CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH;
    /// Supports deferred mapping of arrays.
    deferred_mapping_cuda_array_supported: bool = CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED;
    /// Supports 64-bit stream memory operations.
    can_use_64_bit_stream_mem_ops: bool = CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS;
    /// Supports `CU_STREAM_WAIT_VALUE_NOR`.
    can_use_stream_wait_value_nor: bool = CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR;
    /// Supports dma-buf exports.
    dma_buf_supported: bool = CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED;
    /// Supports interprocess events.
    ipc_event_supported: bool = CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED;
    /// Memory synchronisation domains.
    mem_sync_domain_count: i32 = CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT;
    /// Supports tensor maps.
    tensor_map_access_supported: bool = CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED;
    /// Physical allocations can be exported as fabric handles.
    handle_type_fabric_supported: bool = CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED;
    /// Supports unified function pointers.
    unified_function_pointers: bool = CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS;
    /// How the device's memory appears to host NUMA (0 none, 1 a NUMA node).
    numa_config: i32 = CU_DEVICE_ATTRIBUTE_NUMA_CONFIG;
    /// The NUMA node of the device's memory, -1 if none.
    numa_id: i32 = CU_DEVICE_ATTRIBUTE_NUMA_ID;
    /// Supports multicast objects.
    multicast_supported: bool = CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED;
    /// Clients of an MPS server run on it.
    mps_enabled: bool = CU_DEVICE_ATTRIBUTE_MPS_ENABLED;
    /// The host NUMA node nearest to the device, -1 if none.
    host_numa_id: i32 = CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID;
    /// Supports D3D12 CIG.
    d3d12_cig_supported: bool = CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED;
    /// Decompression algorithms (a bit mask).
    mem_decompress_algorithm_mask: i32 = CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK;
    /// Longest decompression, in bytes.
    mem_decompress_maximum_length: i32 = CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH;
    /// The GPU's PCI device id (vendor in the low 16 bits).
    gpu_pci_device_id: i32 = CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID;
    /// The GPU's PCI subsystem id.
    gpu_pci_subsystem_id: i32 = CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID;
    /// Supports IPC between host NUMA nodes.
    host_numa_multinode_ipc_supported: bool = CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED;
    /// Supports virtual memory management on host NUMA nodes (CUDA 12.9 headers).
    host_numa_virtual_memory_management_supported: bool = CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        if any(feature = "cuda-12090", feature = "cuda-13000", feature = "cuda-13010");
    /// Supports memory pools on host NUMA nodes (CUDA 12.9 headers).
    host_numa_memory_pools_supported: bool = CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED
        if any(feature = "cuda-12090", feature = "cuda-13000", feature = "cuda-13010");
    /// Supports Vulkan CIG (CUDA 13.0 headers).
    vulkan_cig_supported: bool = CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED
        if any(feature = "cuda-13000", feature = "cuda-13010");
    /// Supports memory pools in host memory (CUDA 13.0 headers).
    host_memory_pools_supported: bool = CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED
        if any(feature = "cuda-13000", feature = "cuda-13010");
    /// Supports virtual memory management of host memory (CUDA 13.0 headers).
    host_virtual_memory_management_supported: bool = CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        if any(feature = "cuda-13000", feature = "cuda-13010");
    /// Host allocations can be exported as dma-bufs (CUDA 13.0 headers).
    host_alloc_dma_buf_supported: bool = CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED
        if any(feature = "cuda-13000", feature = "cuda-13010");
    /// Only some native atomics work over the link to the host (CUDA 13.0 headers).
    only_partial_host_native_atomic_supported: bool = CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED
        if any(feature = "cuda-13000", feature = "cuda-13010");
}

impl DeviceProperties {
    /// Whether a memory pool of this device can be exported as a POSIX descriptor (bit 1 of
    /// [`mempool_supported_handle_types`](Self::mempool_supported_handle_types)).
    pub fn pool_posix_fd_supported(&self) -> Option<bool> {
        self.mempool_supported_handle_types
            .map(|types| types & POSIX_FD_BIT != 0)
    }

    /// Whether a memory pool of this device can be exported as a fabric handle (bit 8 of
    /// [`mempool_supported_handle_types`](Self::mempool_supported_handle_types)).
    pub fn pool_fabric_supported(&self) -> Option<bool> {
        self.mempool_supported_handle_types
            .map(|types| types & FABRIC_BIT != 0)
    }
}

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`'s bit.
const POSIX_FD_BIT: i32 = 0x1;
/// `CU_MEM_HANDLE_TYPE_FABRIC`'s bit.
const FABRIC_BIT: i32 = 0x8;

#[cfg(test)]
mod tests {
    use super::{DeviceUuid, PciLocation};

    #[test]
    fn uuids_print_as_nvidia_smi_does() {
        let uuid = DeviceUuid([
            0x5f, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x70, 0x81, 0x92, 0xa3, 0xb4, 0xc5, 0xd6,
            0xe7, 0xf8,
        ]);
        assert_eq!(uuid.to_string(), "GPU-5f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8");
        assert!(DeviceUuid([0; 16]).is_nil() && !uuid.is_nil());
    }

    #[test]
    fn pci_bus_ids_parse() {
        let expected = PciLocation {
            domain: 0,
            bus: 0x18,
            device: 0,
        };
        assert_eq!(PciLocation::parse("0000:18:00.0"), Some(expected));
        assert_eq!(PciLocation::parse("00000000:18:00.0"), Some(expected));
        assert_eq!(expected.to_string(), "0000:18:00");
        for bad in [
            "",
            "18:00.0",
            "0000:18:00",
            "0000:18:00.0:1",
            "zz:18:00.0",
            "0:1:2.",
        ] {
            assert_eq!(PciLocation::parse(bad), None, "{bad:?}");
        }
    }
}
