//! The capability table on the simulated driver: every driver function newer than the CUDA
//! 12.0 floor (`handles_cuda::driver::newer_functions`) is hidden in turn, and the simulator plays
//! each older driver version the table names. In every case each entry point that uses a newer
//! function returns `Ok`, takes its fallback, or returns `Error::NotSupported` naming a
//! function the driver lacks: never a panic.

mod simulator;

use std::collections::BTreeSet;

use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, EventHandle, MemoryPoolHandle, PoolProps, StreamFlags,
    StreamHandle,
    exec::{EventFlags, GreenContextHandle},
    memory::{Advice, Attach, PoolLocation},
};
use handles_tests::kernels::TestKernels;
use simulator::{Scratch, in_scenario, run_scenario, say};

/// Names the child's missing functions (comma-separated API names).
const MISSING: &str = "HANDLES_MISSING_FUNCTIONS";

#[test]
fn every_newer_function_hidden_in_turn_is_an_error_or_a_fallback() {
    let table: Vec<(&str, i32)> = handles_cuda::driver::newer_functions().collect();
    assert!(table.len() >= 10, "the table lists {table:?}");
    for (symbol, needs) in &table {
        let scratch = Scratch::new("hidden");
        let dir = cuda_sim::library_without(&scratch.0, &[symbol]).expect("hide the symbol");
        let path = dir.to_string_lossy().into_owned();
        let report = run_scenario(
            "entry_points_on_an_old_driver",
            &[],
            &[("LD_LIBRARY_PATH", &path), (MISSING, symbol)],
        );
        assert!(
            !report.calls.contains_key(*symbol),
            "{symbol} was hidden, yet called"
        );
        assert!(
            report.violations.is_empty(),
            "{symbol} (CUDA {needs}) hidden: {:?}",
            report.violations
        );
        say(format!("hidden {symbol}: no panic, no violation"));
    }
}

#[test]
fn each_older_driver_the_table_names_gets_errors_or_fallbacks() {
    let table: Vec<(&str, i32)> = handles_cuda::driver::newer_functions().collect();
    let versions: BTreeSet<i32> = table.iter().map(|&(_, needs)| needs - 10).collect();
    for version in versions {
        let missing: Vec<&str> = table
            .iter()
            .filter(|&&(_, needs)| needs > version)
            .map(|&(symbol, _)| symbol)
            .collect();
        let report = run_scenario(
            "entry_points_on_an_old_driver",
            &[],
            &[
                ("CUDA_SIM_DRIVER_VERSION", &version.to_string()),
                (MISSING, &missing.join(",")),
            ],
        );
        for &(symbol, needs) in &table {
            if needs > version {
                assert!(
                    !report.calls.contains_key(symbol),
                    "{symbol} needs {needs}, yet was called on a driver of {version}"
                );
            }
        }
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        say(format!("driver {version}: missing {missing:?}: no panic"));
    }
}

/// A kernel's parameters are asked of the driver without a failing call (compute-sanitizer
/// reports each failing call as an error of the program): the count comes from
/// `cuKernelGetParamCount` on a driver of CUDA 13.2 or newer, and from the PTX before, so
/// `cuKernelGetParamInfo` is called once per parameter and never past the last one. The five
/// test kernels have 3 + 3 + 3 + 2 + 1 parameters.
#[test]
fn kernel_parameters_are_asked_without_a_failing_call() {
    for (version, counted) in [("12040", 0), ("13000", 0), ("13020", 5)] {
        let report = run_scenario(
            "load_the_test_kernels",
            &[],
            &[("CUDA_SIM_DRIVER_VERSION", version)],
        );
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(
            report.calls.get("cuKernelGetParamInfo"),
            Some(&12),
            "driver {version}: {:?}",
            report.calls
        );
        assert_eq!(
            report
                .calls
                .get("cuKernelGetParamCount")
                .copied()
                .unwrap_or(0),
            counted,
            "driver {version}"
        );
        say(format!(
            "driver {version}: 12 parameter queries for 12 parameters, {counted} counts"
        ));
    }
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_load_the_test_kernels() {
    in_scenario();
    let kernels = TestKernels::load().unwrap();
    assert_eq!(
        kernels.copy.kernel().param_sizes().as_deref(),
        Some(&[8, 8, 4][..])
    );
    assert_eq!(
        kernels.spin.kernel().param_sizes().as_deref(),
        Some(&[8][..])
    );
}

/// Checks one entry point's result: `Ok`, or `NotSupported` for a function the driver lacks.
/// Returns the function named by a `NotSupported`.
fn allowed<T: std::fmt::Debug>(
    what: &str,
    result: &handles_cuda::Result<T>,
    missing: &BTreeSet<String>,
) -> Option<&'static str> {
    match result {
        Ok(_) => None,
        Err(Error::NotSupported { function, needs }) => {
            assert!(
                missing.contains(*function),
                "{what}: NotSupported for {function} (CUDA {needs}), which the driver has"
            );
            Some(function)
        }
        Err(other) => panic!("{what}: expected Ok or NotSupported, got {other:?}"),
    }
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_entry_points_on_an_old_driver() {
    in_scenario();
    let missing: BTreeSet<String> = std::env::var(MISSING)
        .unwrap_or_default()
        .split(',')
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    let lacks = |name: &str| missing.contains(name);
    let context = ContextHandle::primary(0).unwrap();
    let stream = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0).unwrap();

    // Event timing: cuEventElapsedTime_v2, with its fallback.
    let (start, end) = (
        EventHandle::create(&context, EventFlags::timing()).unwrap(),
        EventHandle::create(&context, EventFlags::timing()).unwrap(),
    );
    start.record(&stream).unwrap();
    end.record(&stream).unwrap();
    end.synchronize().unwrap();
    let elapsed = start.elapsed_ms(&end);
    assert!(elapsed.is_ok(), "elapsed_ms falls back: {elapsed:?}");

    // Kernels: parameter sizes are optional; the kernel count is NotSupported without it.
    let kernels = TestKernels::load().unwrap();
    assert_eq!(
        kernels.fill.kernel().record().param_sizes.is_some(),
        !lacks("cuKernelGetParamInfo")
    );
    let count = kernels.library.kernel_count();
    let named = allowed("kernel_count", &count, &missing);
    assert_eq!(
        named.is_some(),
        lacks("cuLibraryGetKernelCount"),
        "{count:?}"
    );

    // Batched copies: the batch function, or a loop of cuMemcpyAsync without it.
    let words: Vec<u32> = (0..64).collect();
    let src = handles_cuda::DeviceBuffer::from_slice(&words, &stream).unwrap();
    let dst = handles_cuda::DeviceBuffer::<u32>::zeroed(64, &stream).unwrap();
    let copies: Vec<_> = (0..64)
        .map(|i| handles_cuda::memory::BatchCopy::elements(&src, i, &dst, 63 - i, 1).unwrap())
        .collect();
    stream.copy_batch(&copies).unwrap();
    let reversed: Vec<u32> = words.iter().rev().copied().collect();
    assert_eq!(dst.to_vec(&stream).unwrap(), reversed);

    // Green contexts: creation needs the 12.4 family, a stream also cuGreenCtxStreamCreate.
    let create = GreenContextHandle::create(0, 16);
    let needs_for_create = [
        "cuGreenCtxCreate",
        "cuDeviceGetDevResource",
        "cuDevSmResourceSplitByCount",
        "cuDevResourceGenerateDesc",
    ];
    let named = allowed("GreenContextHandle::create", &create, &missing);
    assert_eq!(
        named.is_some(),
        needs_for_create.iter().any(|name| lacks(name)),
        "{create:?}"
    );
    if let Ok(green) = create {
        let as_context = green.context();
        let named = allowed("GreenContextHandle::context", &as_context, &missing);
        assert_eq!(named.is_some(), lacks("cuCtxFromGreenCtx"));
        let created = green.create_stream(0);
        let named = allowed("GreenContextHandle::create_stream", &created, &missing);
        // A stream needs its own function and the context it belongs to.
        assert_eq!(
            named.is_some(),
            lacks("cuGreenCtxStreamCreate") || lacks("cuCtxFromGreenCtx"),
            "{created:?}"
        );
        if let Ok(green_stream) = created {
            green_stream.synchronize().unwrap();
        }
        // Dropping the green context without its destroy function reports, never panics.
        drop((as_context, green));
    }
    // Managed memory: the _v2 prefetch and advice (CUDA 12.2) fall back to the CUDA 12.0
    // forms, except for a host NUMA node, which only the _v2 forms name.
    let managed = DevicePtrHandle::alloc_managed(&context, 1 << 16, Attach::Global).unwrap();
    managed.prefetch(PoolLocation::Device(0), &stream).unwrap();
    managed.prefetch(PoolLocation::Host, &stream).unwrap();
    managed
        .advise(Advice::SetPreferredLocation(PoolLocation::Host))
        .unwrap();
    managed
        .advise(Advice::SetAccessedBy(PoolLocation::Device(0)))
        .unwrap();
    let numa = managed.prefetch(PoolLocation::HostNuma(0), &stream);
    let named = allowed("prefetch to a NUMA node", &numa, &missing);
    assert_eq!(named.is_some(), lacks("cuMemPrefetchAsync_v2"), "{numa:?}");
    let numa = managed.advise(Advice::SetPreferredLocation(PoolLocation::HostNuma(0)));
    let named = allowed("advice for a NUMA node", &numa, &missing);
    assert_eq!(named.is_some(), lacks("cuMemAdvise_v2"), "{numa:?}");
    assert_eq!(managed.host_view().unwrap().len(), 1 << 16);
    // Host pools: CUDA 12.6 without a NUMA node, 12.2 on one; NotSupported before.
    let version = handles_cuda::driver::driver_version().unwrap();
    for (location, needs) in [
        (PoolLocation::Host, 12060),
        (PoolLocation::HostNuma(0), 12020),
    ] {
        let pool = MemoryPoolHandle::create(&PoolProps {
            location,
            ..PoolProps::device(0)
        });
        match pool {
            Ok(_) => assert!(version >= needs, "a {location:?} pool on {version}"),
            Err(Error::NotSupported { needs: said, .. }) => {
                assert_eq!(said, needs);
                assert!(version < needs, "{location:?} refused on {version}");
            }
            Err(other) => panic!("a {location:?} pool: {other:?}"),
        }
    }
    // Conditional nodes: the handle and the node call (12.3); if/else and switch (12.8).
    let graph = handles_cuda::graph::GraphHandle::create(&context).unwrap();
    let handle = graph.create_conditional(Some(0));
    let named = allowed("GraphHandle::create_conditional", &handle, &missing);
    assert_eq!(named.is_some(), lacks("cuGraphConditionalHandleCreate"));
    if let Ok(handle) = handle {
        use handles_cuda::graph::ConditionalKind;
        let node = graph.add_conditional_node(&[], &handle, ConditionalKind::If);
        let named = allowed("GraphHandle::add_conditional_node", &node, &missing);
        assert_eq!(
            named.is_some(),
            lacks("cuGraphAddNode_v2"),
            "{:?}",
            node.err()
        );
        let other = graph.create_conditional(None).unwrap();
        match graph.add_conditional_node(&[], &other, ConditionalKind::Switch(2)) {
            Ok(_) => assert!(version >= 12080 && !lacks("cuGraphAddNode_v2")),
            Err(Error::NotSupported { needs: 12080, .. }) => assert!(version < 12080),
            Err(Error::NotSupported { function, .. }) => assert_eq!(function, "cuGraphAddNode_v2"),
            Err(other) => panic!("a switch node: {other:?}"),
        }
    }
    // A captured dependent launch becomes a programmatic edge (12.3); NotSupported before,
    // with nothing captured.
    let buffer = DevicePtrHandle::alloc(&context, 1024).unwrap();
    let options = handles_cuda::code::LaunchOptions {
        programmatic_serialization: true,
        ..handles_cuda::code::LaunchOptions::default()
    };
    let captured = handles_cuda::graph::GraphHandle::capture(
        &context,
        handles_cuda::graph::CaptureMode::ThreadLocal,
        |capture| {
            let config = handles_cuda::LaunchConfig::linear(256, 64);
            capture.launch(&kernels.fill, &config, (&buffer, 1, 256))?;
            capture.launch_ex(&kernels.add, &config, &options, (&buffer, 2, 256))
        },
    );
    match captured {
        Ok(graph) => {
            assert!(
                version >= 12030,
                "a programmatic edge captured on {version}"
            );
            graph.instantiate().unwrap().launch(&stream).unwrap();
            let mut words = [0u8; 1024];
            buffer.copy_to_host(&mut words, &stream).unwrap();
            assert_eq!(u32::from_ne_bytes(words[..4].try_into().unwrap()), 3);
        }
        Err(Error::NotSupported { needs: 12030, .. }) => assert!(version < 12030),
        Err(other) => panic!("a captured dependent launch: {other:?}"),
    }
    stream.synchronize().unwrap();
    println!("entry points checked; missing: {missing:?}");
}

/// How many times the device-properties scenario reads each device's properties.
const READS: &str = "HANDLES_PROPERTY_READS";
/// How many attributes the device-properties scenario expects the driver not to know, or
/// `anomaly` for an `Err` (a required attribute unknown).
const UNKNOWN: &str = "HANDLES_UNKNOWN_ATTRIBUTES";

/// Device properties are read once per device: on two devices, a hundred reads each make
/// exactly twice the driver calls of one read on one device (the simulator counts them).
#[test]
fn device_properties_are_read_once_per_device() {
    let once = run_scenario(
        "device_properties",
        &[],
        &[("CUDA_SIM_DEVICES", "1"), (READS, "1"), (UNKNOWN, "0")],
    );
    let many = run_scenario(
        "device_properties",
        &[],
        &[("CUDA_SIM_DEVICES", "2"), (READS, "100"), (UNKNOWN, "0")],
    );
    let calls =
        |report: &cuda_sim::Report, name: &str| report.calls.get(name).copied().unwrap_or(0);
    for name in [
        "cuDeviceGetAttribute",
        "cuDeviceGetName",
        "cuDeviceGetUuid_v2",
        "cuDeviceGetPCIBusId",
        "cuDeviceTotalMem_v2",
    ] {
        let (one, hundred) = (calls(&once, name), calls(&many, name));
        assert!(one > 0, "{name} was not called");
        assert_eq!(
            hundred,
            2 * one,
            "{name}: 100 reads of 2 devices against 1 of 1"
        );
        say(format!(
            "{name}: {one} call(s) for one read; {hundred} for 100 reads of 2 devices"
        ));
    }
}

/// An attribute an older driver does not know (`CUDA_ERROR_INVALID_VALUE`) is `None`, and the
/// rest is read; a required one (the compute capability) unknown is an `Err`, not a panic.
#[test]
fn an_attribute_the_driver_does_not_know_is_none() {
    let clean = run_scenario(
        "device_properties",
        &[],
        &[("CUDA_SIM_DEVICES", "1"), (READS, "1"), (UNKNOWN, "0")],
    );
    let attributes = clean.calls["cuDeviceGetAttribute"];
    // The first queries are the required ones (compute capability, SMs, PCI location); the
    // 10th and the last are attribute fields.
    for n in [10, attributes] {
        run_scenario(
            "device_properties",
            &[("cuDeviceGetAttribute", n, "CUDA_ERROR_INVALID_VALUE")],
            &[("CUDA_SIM_DEVICES", "1"), (READS, "1"), (UNKNOWN, "1")],
        );
        say(format!(
            "attribute query {n} of {attributes} unknown: that field is None"
        ));
    }
    run_scenario(
        "device_properties",
        &[("cuDeviceGetAttribute", 1, "CUDA_ERROR_INVALID_VALUE")],
        &[
            ("CUDA_SIM_DEVICES", "1"),
            (READS, "1"),
            (UNKNOWN, "anomaly"),
        ],
    );
    say("the compute capability unknown: Error::DriverAnomaly");
}

#[test]
#[ignore = "a scenario: runs on the simulator, started by its parent test"]
fn scenario_device_properties() {
    in_scenario();
    let reads: usize = std::env::var(READS).unwrap().parse().unwrap();
    let unknown = std::env::var(UNKNOWN).unwrap();
    for device in handles_cuda::exec::Device::all().unwrap() {
        let first = device.properties();
        if unknown == "anomaly" {
            assert!(
                matches!(
                    first,
                    Err(Error::DriverAnomaly {
                        call: "cuDeviceGetAttribute",
                        ..
                    })
                ),
                "{first:?}"
            );
            println!("refused: {}", first.unwrap_err());
            return;
        }
        let first = first.unwrap();
        let expected: usize = unknown.parse().unwrap();
        assert_eq!(
            first.unknown_attributes().len(),
            expected,
            "{:?}",
            first.unknown_attributes()
        );
        println!("unknown: {:?}", first.unknown_attributes());
        for _ in 1..reads {
            assert!(std::ptr::eq(first, device.properties().unwrap()));
        }
    }
}
