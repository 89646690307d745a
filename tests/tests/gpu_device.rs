//! Device properties (`handles_cuda::exec::Device`): each device's record agrees with itself
//! and with the driver's own answers, and is read once per process. Ignored by default (they
//! need a CUDA GPU); `on_the_simulator` runs them on the simulated driver with two devices.
//! Nothing here names the H200's values: what is checked holds on any GPU.

use handles_cuda::driver::sys;
use handles_cuda::exec::{Device, PciLocation};
use handles_cuda::{ContextHandle, Error};

mod simulator;

/// A raw driver query of device `device`, for comparison with the cached record.
fn raw_attribute(device: &Device, attribute: sys::CUdevice_attribute) -> i32 {
    let mut value = 0;
    // SAFETY: the driver is loaded (the device was made), and `value` is a valid out-pointer.
    let status = unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, device.as_cu()) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS, "{attribute:?}");
    value
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_properties_agree_with_the_driver_and_are_read_once() {
    let devices = Device::all().unwrap();
    assert!(!devices.is_empty(), "a GPU test needs a device");
    let mut uuids = Vec::new();
    for device in &devices {
        let properties = device.properties().unwrap();
        let (major, minor) = properties.compute_capability;
        println!(
            "device {}: {} ({}), cc {major}.{minor}, arch {}, {} SMs, {} MiB, PCI {} ({})",
            device.ordinal(),
            properties.name,
            properties.uuid,
            properties.arch,
            properties.multiprocessor_count,
            properties.total_memory >> 20,
            properties.pci,
            properties.pci_bus_id
        );
        // Cached: every later call returns the very same record, through any Device value.
        let again = Device::new(device.ordinal()).unwrap();
        assert!(std::ptr::eq(properties, again.properties().unwrap()));
        assert!(std::ptr::eq(properties, device.properties().unwrap()));
        assert_eq!(device.name().unwrap(), properties.name);
        assert_eq!(device.arch().unwrap(), properties.arch);
        assert_eq!(device.uuid().unwrap(), properties.uuid);
        assert_eq!(device.compute_capability().unwrap(), (major, minor));

        // Consistent with itself and with the driver's other calls.
        assert_eq!(properties.arch, format!("{major}{minor}"));
        assert!(major >= 5, "compute capability {major}.{minor}");
        assert!(!properties.name.is_empty());
        assert!(!properties.uuid.is_nil(), "a zero UUID");
        let uuid = properties.uuid.to_string();
        assert!(uuid.starts_with("GPU-") && uuid.len() == 40, "{uuid}");
        uuids.push(properties.uuid);
        let mut total = 0usize;
        // SAFETY: a valid out-pointer and device.
        let status = unsafe { sys::cuDeviceTotalMem_v2(&mut total, device.as_cu()) };
        assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
        assert_eq!(properties.total_memory, total);
        let (free, context_total) = ContextHandle::primary(device.ordinal())
            .unwrap()
            .run(handles_cuda::driver::mem_get_info)
            .unwrap();
        // Equal on the GPUs measured; never more than the device has.
        assert!(
            context_total <= properties.total_memory,
            "cuMemGetInfo's total {context_total} > {}",
            properties.total_memory
        );
        assert!(free <= context_total);
        assert_eq!(
            PciLocation::parse(&properties.pci_bus_id),
            Some(properties.pci),
            "the bus id string and the PCI attributes name the same place"
        );
        use sys::CUdevice_attribute as A;
        assert_eq!(
            properties.multiprocessor_count as i32,
            raw_attribute(device, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        );
        assert_eq!(
            properties.l2_cache_size,
            Some(raw_attribute(device, A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE))
        );
        assert!(properties.multiprocessor_count > 0);

        // The attributes any CUDA 12 device has, and the relations between them.
        let known = |value: Option<i32>, what: &str| {
            value.unwrap_or_else(|| panic!("{what} is unknown to the driver"))
        };
        let warp = known(properties.warp_size, "warp size");
        assert_eq!(warp, 32);
        let per_block = known(properties.max_threads_per_block, "threads per block");
        assert!(per_block >= warp && per_block % warp == 0);
        assert!(known(properties.max_block_dim_x, "block x") <= per_block);
        assert!(known(properties.max_grid_dim_x, "grid x") >= 65535);
        let shared = known(properties.max_shared_memory_per_block, "shared per block");
        let optin = known(
            properties.max_shared_memory_per_block_optin,
            "opt-in shared",
        );
        let per_sm = known(
            properties.max_shared_memory_per_multiprocessor,
            "shared per SM",
        );
        assert!(
            shared <= optin && optin <= per_sm,
            "{shared} {optin} {per_sm}"
        );
        assert!(known(properties.max_threads_per_multiprocessor, "threads per SM") >= per_block);
        assert!(known(properties.global_memory_bus_width, "bus width") > 0);
        assert_eq!(properties.unified_addressing, Some(true));
        assert_eq!(properties.memory_pools_supported, Some(true));
        assert_eq!(properties.managed_memory, Some(true));
        assert_eq!(properties.integrated, Some(false), "a discrete GPU");
        assert!(properties.concurrent_kernels.is_some());
        assert!(properties.virtual_memory_management_supported.is_some());
        assert_eq!(properties.pool_posix_fd_supported(), Some(true));
        println!(
            "device {}: {} attributes unknown to this driver: {:?}",
            device.ordinal(),
            properties.unknown_attributes().len(),
            properties.unknown_attributes()
        );
    }
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), devices.len(), "each device has its own UUID");

    let count = devices.len();
    assert!(matches!(
        Device::new(count),
        Err(Error::NoSuchDevice { ordinal, count: c }) if ordinal == count && c == count
    ));
}

/// GPU tests that cannot run on the simulator, with the reason. Empty.
const NOT_SIMULATED: &[(&str, &str)] = &[];

/// Runs every GPU test of this file on the simulated driver (two devices: each its own UUID
/// and PCI location), in strict mode.
#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "gpu_device, 2 devices",
        filters: &[],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 2,
        env: &[],
    }
    .run();
}
