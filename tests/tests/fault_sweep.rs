//! Fault-injection sweep on the simulated driver (cuda-sim): for each handles-cuda
//! constructor, every driver call the scenario makes is failed, one at a time.
//!
//! Each scenario first runs in a child process with no fault; the simulator's report counts
//! its calls (`calls`: function → count). Then, for every counted `(function, n)`, a child
//! runs the scenario again with `CUDA_SIM_FAIL=function:n:CUDA_ERROR_…` (`OUT_OF_MEMORY` for
//! allocations, `UNKNOWN` otherwise). The list of faults is what the simulator counted, not a
//! hand-written one, so a new driver call in the library is swept as soon as it is made.
//!
//! A child runs the scenario, in which every step returns `Ok` or `Err` (a panic fails the
//! child), drops everything, clears its primary-context cache and asserts that the live
//! counts of every handle type are back to their start and the IPC import cache is empty. The
//! parent test then requires, for every run: exit status 0, a report with no violation, and
//! no resource alive at exit. One exception to the last rule: when the failed call was a
//! destroy (or a call a deleter needs, such as restoring a context), the driver still holds
//! the resource and the library can only report it: a leak is accepted when the child's
//! report hook received a deleter failure of the same handle type for each leaked resource.
//! Those cases are counted and printed in the scenario's summary line.
//!
//! The scenario runner (`scenario_child`) is `#[ignore]`d: it only makes sense as a child of
//! a sweep test, under the simulator.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, EventHandle, KernelHandle, LaunchConfig, LibraryHandle,
    MemoryPoolHandle, PoolProps, Result, StreamFlags, StreamHandle,
    code::KernelAttribute,
    driver::sys,
    exec::{Device, EventFlags, GreenContextHandle},
    graph::{CaptureMode, GraphHandle},
    memory::{
        AddressReservationHandle, Advice, Attach, GrowableBuffer, MappingHandle,
        PhysicalAllocationHandle, PoolLocation, ReusePolicy, Sharing,
    },
};
use handles_tests::kernels::TestKernels;
use handles_tests::{Failures, cuda_live_counts};
use simulator::{Scratch, say, tail};

mod simulator;

/// Names the scenario a child runs.
const SCENARIO_ENV: &str = "HANDLES_FAULT_SWEEP_SCENARIO";
/// Child processes each sweep test runs at a time (libtest runs two sweep tests at once).
const WORKERS: usize = 2;

struct Scenario {
    name: &'static str,
    devices: usize,
    run: fn() -> Result<()>,
}

/// A raw driver call made by a scenario itself, as a `Result`.
fn raw(call: &str, status: sys::CUresult) -> Result<()> {
    if status == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{call} (in the scenario) returned {status:?}"
        )))
    }
}

fn primary() -> Result<ContextHandle> {
    ContextHandle::primary(0)
}

fn new_stream(context: &ContextHandle) -> Result<StreamHandle> {
    StreamHandle::create(context, StreamFlags { non_blocking: true }, 0)
}

fn context_primary() -> Result<()> {
    let context = primary()?;
    drop(context);
    Ok(())
}

fn context_with_primary() -> Result<()> {
    ContextHandle::with_primary(0, |context| context.as_cu())?;
    Ok(())
}

fn context_synchronize_and_mem_get_info() -> Result<()> {
    let context = primary()?;
    context.synchronize()?;
    context.mem_get_info()?;
    Ok(())
}

fn stream_create() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    stream.synchronize()
}

fn stream_legacy_in() -> Result<()> {
    let context = primary()?;
    StreamHandle::legacy_in(&context)?.synchronize()
}

fn event_create() -> Result<()> {
    let context = primary()?;
    let event = EventHandle::create(&context, EventFlags::timing())?;
    event.record(&StreamHandle::legacy_in(&context)?)?;
    event.synchronize()
}

fn event_create_in_current() -> Result<()> {
    let context = primary()?;
    // SAFETY: the context is alive (held by `context`) while it is current.
    raw("cuCtxPushCurrent_v2", unsafe {
        sys::cuCtxPushCurrent_v2(context.as_cu())
    })?;
    // Dropped while its context is still current.
    let created = EventHandle::create_in_current(EventFlags::default()).map(drop);
    let mut popped = std::ptr::null_mut();
    // SAFETY: pops what this scenario pushed; `popped` is a valid out-pointer.
    let pop = raw("cuCtxPopCurrent_v2", unsafe {
        sys::cuCtxPopCurrent_v2(&mut popped)
    });
    created.and(pop)
}

fn event_ipc_export_import() -> Result<()> {
    let context = primary()?;
    let flags = EventFlags {
        interprocess: true,
        ..EventFlags::default()
    };
    let event = EventHandle::create(&context, flags)?;
    event.record(&StreamHandle::legacy_in(&context)?)?;
    let token = event.export_ipc()?;
    let opened = EventHandle::import_ipc(&context, &token)?;
    opened.synchronize()
}

fn pool_with(props: PoolProps) -> Result<()> {
    let pool = MemoryPoolHandle::create(&props)?;
    pool.used_bytes()?;
    Ok(())
}

fn pool_device() -> Result<()> {
    pool_with(PoolProps::device(0))
}

fn pool_device_ipc_fd_export_import() -> Result<()> {
    let pool = MemoryPoolHandle::create(&PoolProps {
        ipc: true,
        ..PoolProps::device(0)
    })?;
    let fd = pool.export_posix_fd()?;
    let imported = MemoryPoolHandle::import_posix_fd(fd.as_fd(), 0)?;
    imported.peer_access(0)?;
    Ok(())
}

/// The pool's descriptor taken back by pid and number (`pidfd_getfd` on this very process,
/// which its own rights allow), then imported.
fn pool_import_from_process() -> Result<()> {
    let pool = MemoryPoolHandle::create(&PoolProps {
        ipc: true,
        ..PoolProps::device(0)
    })?;
    let fd = pool.export_posix_fd()?;
    let imported = MemoryPoolHandle::import_from_process(
        std::process::id(),
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        0,
    )?;
    imported.peer_access(0)?;
    Ok(())
}

/// Every device's properties, read twice (the second read is the cache's).
fn device_properties() -> Result<()> {
    for device in Device::all()? {
        let first = device.properties()?;
        assert!(std::ptr::eq(first, device.properties()?));
    }
    Ok(())
}

fn pool_host() -> Result<()> {
    pool_with(PoolProps {
        location: PoolLocation::Host,
        ipc: false,
        max_size: 0,
        device: 0,
    })
}

fn pool_host_ipc() -> Result<()> {
    pool_with(PoolProps {
        location: PoolLocation::Host,
        ipc: true,
        max_size: 0,
        device: 0,
    })
}

fn pool_device_refs() -> Result<()> {
    MemoryPoolHandle::device_current(0)?.used_bytes()?;
    MemoryPoolHandle::device_default(0)?.used_bytes()?;
    Ok(())
}

fn pool_peer_access_two_devices() -> Result<()> {
    let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
    pool.set_peer_access(1, true)?;
    pool.peer_access(1)?;
    Ok(()) // the deleter revokes device 1's access, then destroys the pool
}

fn alloc_from_pool() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &stream)?;
    buffer.memset_async(1, 4096, &stream)?;
    drop(buffer);
    stream.synchronize()
}

/// A batch of three calls' worth of copies (2 × 1024 + 8) on a second stream between buffers of
/// the first: a failure of any call, the second batch call included (after the first chunk was
/// queued), must leave every free ordered after what was queued.
fn copy_batch() -> Result<()> {
    let context = primary()?;
    let home = new_stream(&context)?;
    let other = new_stream(&context)?;
    let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
    let a = DevicePtrHandle::alloc_from_pool(&pool, 1 << 16, &home)?;
    let b = DevicePtrHandle::alloc_from_pool(&pool, 1 << 16, &home)?;
    let c = DevicePtrHandle::alloc_from_pool(&pool, 1 << 16, &home)?;
    a.memset_async(1, 1 << 16, &home)?;
    home.synchronize()?;
    let copies: Vec<handles_cuda::memory::BatchCopy> = (0..2 * 1024 + 8)
        .map(|i| {
            // The first 1024 copies write `b`, the rest `c`: the free of `c` is ordered only
            // if the later calls were queued.
            let (dst, at) = if i < 1024 { (&b, i) } else { (&c, i - 1024) };
            handles_cuda::memory::BatchCopy::bytes(&a, i * 16, dst, at * 16, 16)
        })
        .collect();
    let batched = other.copy_batch(&copies);
    drop(copies);
    drop((a, b, c));
    batched?;
    other.synchronize()
}

fn alloc_async() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    let buffer = DevicePtrHandle::alloc_async(4096, &stream)?;
    buffer.memset_async(1, 4096, &stream)?;
    drop(buffer);
    stream.synchronize()
}

fn alloc_synchronous() -> Result<()> {
    let context = primary()?;
    let buffer = DevicePtrHandle::alloc(&context, 4096)?;
    drop(buffer);
    Ok(())
}

fn alloc_host() -> Result<()> {
    let context = primary()?;
    let buffer = DevicePtrHandle::alloc_host(&context, 4096)?;
    drop(buffer);
    Ok(())
}

fn alloc_managed() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    let buffer = DevicePtrHandle::alloc_managed(&context, 4096, Attach::Global)?;
    buffer.advise(Advice::SetPreferredLocation(PoolLocation::Device(0)))?;
    buffer.prefetch(PoolLocation::Device(0), &stream)?;
    buffer.memset_async(1, 4096, &stream)?;
    buffer.attach(&stream, Attach::Single)?;
    buffer.prefetch(PoolLocation::Host, &stream)?;
    let view = buffer.host_view()?;
    let first = view[0];
    drop(view);
    if first != 1 {
        return Err(Error::InvalidArgument(format!(
            "read {first} through the view"
        )));
    }
    Ok(())
}

fn host_pool_alloc_and_view() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    let pool = MemoryPoolHandle::create(&PoolProps {
        location: PoolLocation::Host,
        ..PoolProps::device(0)
    })?;
    pool.set_peer_access(0, true)?;
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &stream)?;
    buffer.memset_async(2, 4096, &stream)?;
    let first = buffer.host_view_mut()?[0];
    if first != 2 {
        return Err(Error::InvalidArgument(format!(
            "read {first} through the view"
        )));
    }
    Ok(())
}

fn pointer_ipc_export_import() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    let pool = MemoryPoolHandle::create(&PoolProps {
        ipc: true,
        ..PoolProps::device(0)
    })?;
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &stream)?;
    buffer.memset_async(7, 4096, &stream)?;
    // The first export fails until the pool's handle was exported once (driver 580): this
    // covers the library's export-and-retry path.
    let pointer = buffer.export_ipc()?;
    let fd = pool.export_posix_fd()?;
    let imported_pool = MemoryPoolHandle::import_posix_fd(fd.as_fd(), 0)?;
    let imported = DevicePtrHandle::import_ipc(&imported_pool, &pointer, &stream)?;
    let mut host = [0u8; 16];
    imported.copy_to_host(&mut host, &stream)?;
    drop(imported);
    stream.synchronize()
}

fn set_deallocation_stream() -> Result<()> {
    let context = primary()?;
    let (first, second) = (new_stream(&context)?, new_stream(&context)?);
    let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 4096, &first)?;
    buffer.memset_async(1, 4096, &first)?;
    buffer.set_deallocation_stream(&second)?;
    drop(buffer);
    second.synchronize()?;
    first.synchronize()
}

fn library_load_and_kernel_get() -> Result<()> {
    let library = LibraryHandle::load_ptx(handles_tests::kernels::PTX)?;
    let kernel = KernelHandle::get(&library, "fill_u32")?;
    kernel.attribute(KernelAttribute::MaxThreadsPerBlock, 0)?;
    drop(library);
    drop(kernel);
    Ok(())
}

fn kernel_launch() -> Result<()> {
    let context = primary()?;
    let (home, other) = (new_stream(&context)?, new_stream(&context)?);
    let kernels = TestKernels::load()?;
    let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 256 * 4, &home)?;
    kernels
        .fill
        .launch(&other, &LaunchConfig::linear(256, 64), (&buffer, 3, 256))?;
    drop(buffer);
    drop(kernels);
    other.synchronize()?;
    home.synchronize()
}

fn tensor_map_im2col() -> Result<()> {
    use handles_cuda::code::{Im2colTensor, TensorMap};
    let context = primary()?;
    let stream = new_stream(&context)?;
    let buffer = handles_cuda::DeviceBuffer::<f32>::zeroed(16 * 8 * 8 * 2, &stream)?;
    let mut description = Im2colTensor::nhwc(16, 8, 8, 2, 4, 16, 32);
    description.lower_corner = vec![-1, -1];
    description.upper_corner = vec![-1, -1];
    let map = TensorMap::im2col(&buffer, &description)?;
    drop(buffer);
    drop(map);
    stream.synchronize()
}

fn launch_attributes_occupancy_tensor_map() -> Result<()> {
    use handles_cuda::code::{LaunchOptions, OccupancyFlags, ProgrammaticEvent, SharedPerBlock};
    use handles_cuda::code::{TensorMap, TiledTensor};
    let context = primary()?;
    let stream = new_stream(&context)?;
    let kernels = TestKernels::load()?;
    let fill = kernels.fill.kernel();
    fill.max_active_blocks_per_sm(&context, 256, 0, OccupancyFlags::Default)?;
    fill.potential_block_size(
        &context,
        SharedPerBlock::PerBlock(|b| b as usize),
        0,
        OccupancyFlags::Default,
    )?;
    fill.available_dynamic_shared(&context, 2, 256)?;
    fill.max_active_clusters(&context, &LaunchConfig::linear(1024, 256), [2, 1, 1])?;
    let buffer = handles_cuda::DeviceBuffer::<f32>::zeroed(32 * 32, &stream)?;
    let map = TensorMap::tiled(&buffer, &TiledTensor::matrix(32, 32, 4, 16, 16))?;
    drop(buffer);
    let words = DevicePtrHandle::alloc_async(256 * 4, &stream)?;
    let cooperative = LaunchOptions {
        cooperative: true,
        ..LaunchOptions::default()
    };
    kernels.fill.launch_ex(
        &stream,
        &LaunchConfig::linear(256, 64),
        &cooperative,
        (&words, 1, 256),
    )?;
    let event = EventHandle::create(&context, EventFlags::default())?;
    let dependent = LaunchOptions {
        programmatic_serialization: true,
        programmatic_event: Some(ProgrammaticEvent {
            event,
            trigger_at_block_start: false,
        }),
        ..LaunchOptions::default()
    };
    kernels.fill.launch_ex(
        &stream,
        &LaunchConfig::linear(256, 64),
        &dependent,
        (&words, 2, 256),
    )?;
    drop((map, words, dependent, kernels));
    stream.synchronize()
}

fn graph_capture_instantiate_launch() -> Result<()> {
    use handles_cuda::code::LaunchOptions;
    let context = primary()?;
    let stream = new_stream(&context)?;
    let kernels = TestKernels::load()?;
    let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, 256 * 4, &stream)?;
    let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
        capture.memset(&buffer, 0, 0, 256 * 4)?;
        capture.launch(
            &kernels.add_one,
            &LaunchConfig::linear(256, 64),
            (&buffer, 256),
        )?;
        // A captured dependent launch: a programmatic edge from the kernel before it.
        let dependent = LaunchOptions {
            programmatic_serialization: true,
            ..LaunchOptions::default()
        };
        capture.launch_ex(
            &kernels.add,
            &LaunchConfig::linear(256, 64),
            &dependent,
            (&buffer, 2, 256),
        )
    })?;
    let exec = graph.instantiate()?;
    drop((graph, kernels));
    exec.launch(&stream)?;
    drop(buffer);
    exec.launch(&stream)?;
    drop(exec);
    stream.synchronize()
}

/// A capture whose closure ignores its calls' errors: whatever was captured must still be
/// attached, so that the graph never runs into a buffer nothing keeps (the strict simulator
/// reports such a launch as a violation). A launch queued into the capture whose restore of
/// the caller's context fails (`cuCtxSetCurrent`) returned before attaching its buffers.
fn graph_capture_ignoring_errors() -> Result<()> {
    use handles_cuda::code::LaunchOptions;
    let context = primary()?;
    let stream = new_stream(&context)?;
    let kernels = TestKernels::load()?;
    // A buffer per captured call, so that no call's attachment can stand in for another's.
    let buffers = [
        DevicePtrHandle::alloc(&context, 256 * 4)?,
        DevicePtrHandle::alloc(&context, 256 * 4)?,
        DevicePtrHandle::alloc(&context, 256 * 4)?,
    ];
    // The closure's errors, returned only after the graph ran without the buffers' handles.
    let ignored = std::cell::RefCell::new(Vec::new());
    let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
        let config = LaunchConfig::linear(256, 64);
        let dependent = LaunchOptions {
            programmatic_serialization: true,
            ..LaunchOptions::default()
        };
        let results = [
            capture.memset(&buffers[0], 0, 0, 256 * 4),
            capture.launch(&kernels.add_one, &config, (&buffers[1], 256)),
            capture.launch_ex(&kernels.add, &config, &dependent, (&buffers[2], 2, 256)),
        ];
        ignored
            .borrow_mut()
            .extend(results.into_iter().filter_map(Result::err));
        Ok(())
    })?;
    let exec = graph.instantiate()?;
    drop((graph, kernels, buffers));
    exec.launch(&stream)?;
    drop(exec);
    stream.synchronize()?;
    match ignored.into_inner().into_iter().next() {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

fn graph_nodes_and_update() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    let kernels = TestKernels::load()?;
    let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
    // Each graph has a buffer of its own, which only the graph keeps: an update that did not
    // swap what the executable graph keeps would launch into freed memory.
    let build = |value: u32| -> Result<GraphHandle> {
        let buffer = DevicePtrHandle::alloc_from_pool(&pool, 64 * 4, &stream)?;
        let graph = GraphHandle::create(&context)?;
        let cleared = graph.add_memset_node(&[], &buffer, 0, 0, 64 * 4)?;
        graph.add_kernel_node(
            &[cleared],
            &kernels.fill,
            &LaunchConfig::linear(64, 64),
            (&buffer, value, 64),
        )?;
        Ok(graph)
    };
    let exec = build(1)?.instantiate()?;
    exec.launch(&stream)?;
    let second = build(2)?;
    let updated = exec.update(&second);
    drop(second);
    updated?;
    exec.launch(&stream)?;
    drop(exec);
    stream.synchronize()
}

/// A while loop that its body's kernel ends, a switch whose body holds a child graph, the
/// DOT dump, then an instantiation and a launch.
fn graph_conditional_and_child_nodes() -> Result<()> {
    use handles_cuda::code::{Buffer, Conditional, ConditionalHandle};
    use handles_cuda::graph::{ConditionalKind, DotFlags};
    let context = primary()?;
    let stream = new_stream(&context)?;
    let library = handles_tests::conditional_kernels::load()?;
    // SAFETY: count_to(handle, counter, k) touches counter[0] only, which the check requires.
    let count_to = unsafe {
        KernelHandle::get(&library, "count_to")?.typed::<(Conditional, Buffer, u32)>(
            |(_, counter, _): &(&ConditionalHandle, &DevicePtrHandle, u32), _| {
                if counter.size() >= 4 {
                    Ok(())
                } else {
                    Err(Error::InvalidArgument("counter too small".into()))
                }
            },
        )?
    };
    let counter = DevicePtrHandle::alloc(&context, 4)?;
    let graph = GraphHandle::create(&context)?;
    let handle = graph.create_conditional(Some(1))?;
    let reset = graph.add_memset_node(&[], &counter, 0, 0, 4)?;
    let looped = graph.add_conditional_node(&[reset], &handle, ConditionalKind::While)?;
    looped.bodies[0].add_kernel_node(
        &[],
        &count_to,
        &LaunchConfig::linear(1, 1),
        (&handle, &counter, 3),
    )?;
    let choice = graph.create_conditional(Some(1))?;
    let switch = graph.add_conditional_node(&[looped.node], &choice, ConditionalKind::Switch(2))?;
    let child = GraphHandle::create(&context)?;
    child.add_memset_node(&[], &counter, 0, 7, 1)?;
    switch.bodies[1].add_child_graph_node(&[], &child)?;
    let scratch = Scratch::new("dot");
    graph.debug_dot(scratch.join("graph.dot"), DotFlags::VERBOSE)?;
    let exec = graph.instantiate()?;
    drop((graph, looped, switch, child, count_to, library));
    exec.launch(&stream)?;
    drop(exec);
    stream.synchronize()
}

fn graph_memory_nodes() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    let kernels = TestKernels::load()?;
    let out = DevicePtrHandle::alloc(&context, 64 * 4)?;
    let graph = GraphHandle::create(&context)?;
    let (allocated, scratch) = graph.add_mem_alloc_node(&[], 64 * 4)?;
    let filled = graph.add_kernel_node(
        &[allocated],
        &kernels.fill,
        &LaunchConfig::linear(64, 64),
        (&scratch, 3, 64),
    )?;
    let copied = graph.add_copy_node(&[filled], &scratch, 0, &out, 0, 64 * 4)?;
    graph.add_mem_free_node(&[copied], &scratch)?;
    let exec = graph.instantiate()?;
    drop((graph, scratch, kernels));
    exec.launch(&stream)?;
    exec.launch(&stream)?;
    drop(exec);
    stream.synchronize()
}

fn graph_node_updates() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    let kernels = TestKernels::load()?;
    let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
    let [a, b] = [0; 2].map(|_| DevicePtrHandle::alloc_from_pool(&pool, 64 * 4, &stream));
    let (a, b) = (a?, b?);
    let graph = GraphHandle::create(&context)?;
    let set = graph.add_memset_node(&[], &a, 0, 0, 64 * 4)?;
    let add = graph.add_kernel_node(
        &[set],
        &kernels.add,
        &LaunchConfig::linear(64, 64),
        (&a, 1, 64),
    )?;
    let copy = graph.add_copy_node(&[add], &a, 0, &b, 0, 64 * 4)?;
    let exec = graph.instantiate()?;
    drop(graph);
    exec.launch(&stream)?;
    exec.set_kernel_node_params(
        add,
        &kernels.add,
        &LaunchConfig::linear(64, 64),
        (&b, 2, 64),
    )?;
    exec.set_memset_node_params(set, &b, 0, 1, 64 * 4)?;
    exec.set_copy_node_params(copy, &b, 0, &a, 0, 64 * 4)?;
    exec.set_node_enabled(add, false)?;
    exec.node_enabled(add)?;
    drop((a, b));
    exec.launch(&stream)?;
    drop(exec);
    stream.synchronize()
}

fn graph_capture_fork_join() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    let kernels = TestKernels::load()?;
    let [a, b] = [0; 2].map(|_| DevicePtrHandle::alloc(&context, 64 * 4));
    let (a, b) = (a?, b?);
    let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
        let branch = capture.fork()?;
        branch.launch(&kernels.fill, &LaunchConfig::linear(64, 64), (&a, 1, 64))?;
        capture.launch(&kernels.fill, &LaunchConfig::linear(64, 64), (&b, 2, 64))?;
        capture.join(branch)?;
        let late = capture.fork()?;
        late.copy(&a, 0, &b, 0, 64 * 4)
    })?;
    let exec = graph.instantiate()?;
    drop((graph, kernels));
    exec.launch(&stream)?;
    drop(exec);
    stream.synchronize()
}

fn host_functions() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    let ran = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = ran.clone();
    stream.launch_host(move || {
        seen.fetch_add(1, Ordering::SeqCst);
    })?;
    let graph = GraphHandle::create(&context)?;
    let seen = ran.clone();
    graph.add_host_node(&[], move || {
        seen.fetch_add(1, Ordering::SeqCst);
    })?;
    let exec = graph.instantiate()?;
    drop(graph);
    exec.launch(&stream)?;
    drop(exec);
    stream.synchronize()
}

fn event_completed() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    let event = EventHandle::create(&context, EventFlags::default())?;
    let buffer = DevicePtrHandle::alloc_async(1 << 20, &stream)?;
    buffer.memset_async(1, 1 << 20, &stream)?;
    event.record(&stream)?;
    let completed = event.completed();
    let outcome = completed.map(|mut future| {
        // Polled with a waker that does nothing, until the host function marks it done.
        let mut task = std::task::Context::from_waker(std::task::Waker::noop());
        let start = std::time::Instant::now();
        while std::future::Future::poll(std::pin::Pin::new(&mut future), &mut task).is_pending() {
            assert!(start.elapsed().as_secs() < 10, "the completion never came");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    handles_cuda::exec::clear_notifiers();
    outcome
}

fn vmm_growable_buffer() -> Result<()> {
    let context = primary()?;
    let stream = new_stream(&context)?;
    let buffer = GrowableBuffer::new(0, 8 << 20, 2 << 20)?;
    buffer.grow_to(6 << 20)?;
    let slice = buffer.slice((2 << 20) - 64, 128)?;
    slice.memset_async(3, 128, &stream)?;
    drop(buffer);
    drop(slice);
    stream.synchronize()
}

fn vmm_export_import() -> Result<()> {
    let grain = handles_cuda::memory::granularity(PoolLocation::Device(0))?;
    let physical =
        PhysicalAllocationHandle::create(PoolLocation::Device(0), grain, Sharing::PosixFd)?;
    let fd = physical.export_posix_fd()?;
    let imported =
        PhysicalAllocationHandle::import_posix_fd(fd.as_fd(), PoolLocation::Device(0), grain)?;
    let reservation = AddressReservationHandle::reserve(grain, grain)?;
    let mapping = MappingHandle::map(&reservation, 0, &imported, 0, grain, &[0])?;
    drop((physical, imported, reservation));
    drop(mapping);
    Ok(())
}

fn green_context_stream_launch() -> Result<()> {
    let kernels = TestKernels::load()?;
    let green = GreenContextHandle::create(0, 16)?;
    let stream = green.create_stream(0)?;
    let context = green.context()?;
    let buffer = DevicePtrHandle::alloc(&context, 256 * 4)?;
    kernels
        .fill
        .launch(&stream, &LaunchConfig::linear(256, 256), (&buffer, 1, 256))?;
    drop((green, context, buffer, kernels));
    stream.synchronize()
}

fn pool_tuning() -> Result<()> {
    let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
    pool.set_release_threshold(1 << 20)?;
    pool.release_threshold()?;
    pool.set_reuse_policy(ReusePolicy {
        follow_event_dependencies: true,
        allow_opportunistic: false,
        allow_internal_dependencies: true,
    })?;
    pool.reuse_policy()?;
    pool.usage()?;
    pool.reset_high_watermarks()?;
    let made_current = pool.set_device_current(0).map(drop);
    // The device's default pool made current again (twice: a fault fails only one call), so
    // that the pool this program made is no longer kept alive as the current one.
    let reset = || {
        MemoryPoolHandle::device_default(0)?
            .set_device_current(0)
            .map(drop)
    };
    let restored = reset().or_else(|_| reset());
    made_current.and(restored)
}

macro_rules! scenarios {
    ($($test:ident: $name:literal, $devices:literal devices, $run:path;)*) => {
        const SCENARIOS: &[Scenario] = &[
            $(Scenario { name: $name, devices: $devices, run: $run },)*
        ];
        $(
            #[test]
            fn $test() {
                sweep(scenario($name));
            }
        )*
    };
}

scenarios! {
    context_primary_faults: "ContextHandle::primary", 1 devices, context_primary;
    context_with_primary_faults: "ContextHandle::with_primary", 1 devices, context_with_primary;
    context_synchronize_faults: "ContextHandle::synchronize+mem_get_info", 1 devices,
        context_synchronize_and_mem_get_info;
    stream_create_faults: "StreamHandle::create", 1 devices, stream_create;
    stream_legacy_in_faults: "StreamHandle::legacy_in", 1 devices, stream_legacy_in;
    event_create_faults: "EventHandle::create", 1 devices, event_create;
    event_create_in_current_faults: "EventHandle::create_in_current", 1 devices,
        event_create_in_current;
    event_ipc_faults: "EventHandle::export_ipc+import_ipc", 1 devices, event_ipc_export_import;
    pool_device_faults: "MemoryPoolHandle::create(device)", 1 devices, pool_device;
    pool_ipc_fd_faults: "MemoryPoolHandle::create(device, ipc)+export_posix_fd+import_posix_fd",
        1 devices, pool_device_ipc_fd_export_import;
    pool_import_from_process_faults: "MemoryPoolHandle::import_from_process", 1 devices,
        pool_import_from_process;
    device_properties_faults: "Device::properties", 1 devices, device_properties;
    pool_host_faults: "MemoryPoolHandle::create(host)", 1 devices, pool_host;
    pool_host_ipc_faults: "MemoryPoolHandle::create(host, ipc)", 1 devices, pool_host_ipc;
    pool_device_refs_faults: "MemoryPoolHandle::device_current+device_default", 1 devices,
        pool_device_refs;
    pool_peer_access_faults: "MemoryPoolHandle::set_peer_access(2 devices)", 2 devices,
        pool_peer_access_two_devices;
    alloc_from_pool_faults: "DevicePtrHandle::alloc_from_pool", 1 devices, alloc_from_pool;
    alloc_async_faults: "DevicePtrHandle::alloc_async", 1 devices, alloc_async;
    copy_batch_faults: "StreamHandle::copy_batch", 1 devices, copy_batch;
    alloc_synchronous_faults: "DevicePtrHandle::alloc", 1 devices, alloc_synchronous;
    alloc_host_faults: "DevicePtrHandle::alloc_host", 1 devices, alloc_host;
    alloc_managed_faults: "DevicePtrHandle::alloc_managed+advise+prefetch+attach+host_view",
        1 devices, alloc_managed;
    host_pool_faults: "MemoryPoolHandle::create(host)+alloc_from_pool+host_view_mut", 1 devices,
        host_pool_alloc_and_view;
    pointer_ipc_faults: "DevicePtrHandle::export_ipc+import_ipc", 1 devices,
        pointer_ipc_export_import;
    set_deallocation_stream_faults: "DevicePtrHandle::set_deallocation_stream", 1 devices,
        set_deallocation_stream;
    library_faults: "LibraryHandle::load_ptx+KernelHandle::get", 1 devices,
        library_load_and_kernel_get;
    kernel_launch_faults: "TypedKernel::launch", 1 devices, kernel_launch;
    launch_attributes_faults: "occupancy+TensorMap::tiled+TypedKernel::launch_ex(cooperative, programmatic)",
        1 devices, launch_attributes_occupancy_tensor_map;
    tensor_map_im2col_faults: "TensorMap::im2col", 1 devices, tensor_map_im2col;
    graph_capture_faults: "GraphHandle::capture(+Capture::launch_ex)+instantiate+GraphExecHandle::launch", 1 devices,
        graph_capture_instantiate_launch;
    graph_capture_ignoring_errors_faults:
        "GraphHandle::capture whose closure ignores its calls' errors", 1 devices,
        graph_capture_ignoring_errors;
    graph_nodes_faults: "GraphHandle::add_*_node+GraphExecHandle::update", 1 devices,
        graph_nodes_and_update;
    graph_conditional_faults:
        "GraphHandle::create_conditional+add_conditional_node+add_child_graph_node+debug_dot",
        1 devices, graph_conditional_and_child_nodes;
    graph_memory_faults: "GraphHandle::add_mem_alloc_node+add_mem_free_node", 1 devices,
        graph_memory_nodes;
    graph_node_update_faults:
        "GraphExecHandle::set_kernel/memset/copy_node_params+set_node_enabled", 1 devices,
        graph_node_updates;
    graph_fork_join_faults: "Capture::fork+join", 1 devices, graph_capture_fork_join;
    host_function_faults: "StreamHandle::launch_host+GraphHandle::add_host_node", 1 devices,
        host_functions;
    event_completed_faults: "EventHandle::completed", 1 devices, event_completed;
    vmm_growable_faults: "GrowableBuffer::new+grow_to+slice", 1 devices, vmm_growable_buffer;
    vmm_share_faults: "PhysicalAllocationHandle::export_posix_fd+import_posix_fd+MappingHandle::map",
        1 devices, vmm_export_import;
    green_context_faults: "GreenContextHandle::create+create_stream", 1 devices,
        green_context_stream_launch;
    pool_tuning_faults: "MemoryPoolHandle attributes+set_device_current", 1 devices, pool_tuning;
}

fn scenario(name: &str) -> &'static Scenario {
    SCENARIOS
        .iter()
        .find(|scenario| scenario.name == name)
        .unwrap_or_else(|| panic!("no scenario {name:?}"))
}

/// The child: runs one scenario (named by `HANDLES_FAULT_SWEEP_SCENARIO`) and checks that
/// everything it made is gone. Prints its outcome for the parent.
#[test]
#[ignore = "a child of the fault-sweep tests; runs on the simulator"]
fn scenario_child() {
    let name = std::env::var(SCENARIO_ENV)
        .expect("scenario_child runs only as a child of a fault-sweep test, on the simulator");
    let scenario = scenario(&name);
    let start = cuda_live_counts();
    let failures = Failures::watch();
    let result = (scenario.run)();
    // Releases the disposal thread finishes (a pool destroyed once its frees ran) report
    // through the same hook: waited for before the failures are read.
    handles_cuda::exec::flush_disposals(std::time::Duration::from_secs(10));
    handles_cuda::exec::clear_primary_cache();
    let reported = failures.seen();
    drop(failures);
    match &result {
        Ok(()) => println!("sweep-outcome: ok"),
        Err(error) => println!("sweep-outcome: err: {error}"),
    }
    for line in &reported {
        println!("sweep-deleter-failure: {line}");
    }
    let mut current = std::ptr::null_mut();
    // SAFETY: `current` is a valid out-pointer.
    match unsafe { sys::cuCtxGetCurrent(&mut current) } {
        sys::CUresult::CUDA_SUCCESS if current.is_null() => println!("sweep-current-context: none"),
        sys::CUresult::CUDA_SUCCESS => println!("sweep-current-context: {current:?}"),
        status => println!("sweep-current-context: unknown ({status:?})"),
    }
    assert_eq!(
        handles_cuda::ipc::cached_imports(),
        0,
        "the IPC import cache is empty"
    );
    // A stream or mapping whose destroy failed keeps its owner (context, reservation) alive
    // on purpose, so that nothing is destroyed under it, and an executable graph with memory
    // nodes keeps its source graph (which owns the memory) and what that graph keeps: one more
    // live handle per such failure; so does a primary context an event left current on this
    // thread when `clear_primary_cache` could not make it not current, and pool memory whose
    // free failed keeps its pool.
    let kept = reported
        .iter()
        .filter(|line| {
            line.starts_with("Stream ")
                || line.starts_with("Context ")
                || line.starts_with("Mapping ")
                || line.starts_with("GraphExec ")
                || line.starts_with("DevicePtr ")
        })
        .count();
    let end = cuda_live_counts();
    assert!(
        end.iter()
            .zip(&start)
            .all(|(end, start)| *end >= *start && *end - *start <= kept),
        "live counts returned to their start (or kept for a failed destroy): {end:?} vs {start:?}"
    );
}

/// What one child run showed.
struct RunOutcome {
    fault: Option<(String, u64)>,
    passed: bool,
    returned_err: bool,
    deleter_failures: Vec<String>,
    context_left_current: bool,
    /// The child's own final `cuCtxGetCurrent` (its check, not the scenario's) failed.
    own_check_failed: bool,
    report: Option<cuda_sim::Report>,
    stdout: String,
    stderr: String,
}

fn error_for(function: &str) -> &'static str {
    if function.starts_with("cuMemAlloc") || function.starts_with("cuMemHostAlloc") {
        "CUDA_ERROR_OUT_OF_MEMORY"
    } else {
        "CUDA_ERROR_UNKNOWN"
    }
}

fn run_child(
    scenario: &Scenario,
    fault: Option<(&str, u64)>,
    scratch: &Scratch,
    index: usize,
) -> RunOutcome {
    use cuda_sim::SimCommand;
    let mut command = simulator::this_binary();
    command
        .args([
            "scenario_child",
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO_ENV, scenario.name)
        .env("RUST_BACKTRACE", "0")
        .sim_devices(scenario.devices);
    if let Some((function, n)) = fault {
        command.sim_fail(&[(function, n, error_for(function))]);
    }
    let (output, report) =
        simulator::run_with_report(&mut command, &scratch.join(&format!("run-{index}.json")));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    // With `--nocapture` the first line a test prints follows libtest's `test name ... `.
    let marked = |marker: &str| -> Vec<String> {
        stdout
            .lines()
            .filter_map(|line| Some(line[line.find(marker)? + marker.len()..].to_string()))
            .collect()
    };
    let deleter_failures = marked("sweep-deleter-failure: ");
    RunOutcome {
        fault: fault.map(|(function, n)| (function.to_string(), n)),
        passed: output.status.success(),
        returned_err: marked("sweep-outcome: ")
            .iter()
            .any(|outcome| outcome.starts_with("err")),
        context_left_current: marked("sweep-current-context: ")
            .iter()
            .any(|current| current.starts_with("0x")),
        own_check_failed: marked("sweep-current-context: ")
            .iter()
            .any(|current| current.starts_with("unknown")),
        deleter_failures,
        report,
        stdout,
        stderr,
    }
}

/// The handle type whose deleter frees resources of the simulator's leak type `kind`.
fn handle_type_of_leak(kind: &str) -> Option<&'static str> {
    match kind {
        "stream" => Some("Stream"),
        "event" => Some("Event"),
        "pool" => Some("MemoryPool"),
        "allocation" | "sync_allocation" | "host_allocation" | "managed_allocation" | "import" => {
            Some("DevicePtr")
        }
        "primary_context" | "context" => Some("Context"),
        "library" => Some("Library"),
        "graph" => Some("Graph"),
        "graph_exec" => Some("GraphExec"),
        "physical_allocation" => Some("PhysicalAllocation"),
        "reservation" => Some("AddressReservation"),
        "mapping" => Some("Mapping"),
        "green_context" => Some("GreenContext"),
        _ => None,
    }
}

/// Leaks not accounted for by a reported deleter failure of a matching handle type: each
/// failure line (`"Type 0xraw: error"`) accounts for one leaked resource of its type.
fn unexplained_leaks(outcome: &RunOutcome, report: &cuda_sim::Report) -> BTreeMap<String, u64> {
    let mut budget: BTreeMap<&str, u64> = BTreeMap::new();
    for failure in &outcome.deleter_failures {
        let handle_type = failure.split(' ').next().unwrap_or("");
        *budget.entry(handle_type).or_default() += 1;
        // A failed destroy keeps what the resource needs alive on purpose: a stream its
        // context, a mapping its reservation, an executable graph with memory nodes its source
        // graph (which owns the memory) with the handles that graph keeps, pool memory its
        // pool.
        let kept: &[&str] = match handle_type {
            "Stream" => &["Context", "GreenContext"],
            "Mapping" => &["AddressReservation"],
            "GraphExec" => &["Graph", "Library", "DevicePtr", "Event", "Context"],
            // Pool memory whose free failed keeps its pool (and the pool its context).
            "DevicePtr" => &["MemoryPool", "Context"],
            _ => &[],
        };
        for owner in kept {
            *budget.entry(owner).or_default() += 1;
        }
    }
    let mut unexplained = BTreeMap::new();
    for (kind, count) in &report.leaks {
        let left = handle_type_of_leak(kind).and_then(|handle_type| budget.get_mut(handle_type));
        match left {
            Some(left) if *left >= *count => *left -= count,
            _ => {
                unexplained.insert(kind.clone(), *count);
            }
        }
    }
    unexplained
}

/// What is wrong with a run, if anything.
fn problems_of(outcome: &RunOutcome) -> Vec<String> {
    let mut problems = Vec::new();
    if !outcome.passed {
        let panic = outcome
            .stdout
            .lines()
            .chain(outcome.stderr.lines())
            .skip_while(|line| !line.contains("panicked at"))
            .take(6)
            .collect::<Vec<_>>()
            .join("\n        ");
        problems.push(format!(
            "the child failed (a panic or live counts not back): {}",
            if panic.is_empty() {
                tail(&outcome.stderr, 8)
            } else {
                panic
            }
        ));
    }
    match &outcome.report {
        None => problems.push("no simulator report".into()),
        Some(report) => {
            if !report.violations.is_empty() {
                problems.push(simulator::describe_violations(report, 3));
            }
            let unexplained = unexplained_leaks(outcome, report);
            if !unexplained.is_empty() {
                problems.push(format!(
                    "leaked at exit: {} (deleter failures reported: {:?})",
                    simulator::describe_leaks(&unexplained),
                    outcome.deleter_failures
                ));
            }
        }
    }
    if outcome.context_left_current && !outcome.returned_err && outcome.deleter_failures.is_empty()
    {
        problems.push("a context was left current although every call returned Ok".into());
    }
    problems
}

fn sweep(scenario: &'static Scenario) {
    let started = std::time::Instant::now();
    let scratch = Scratch::new("fault-sweep");
    let baseline = run_child(scenario, None, &scratch, 0);
    let mut problems: Vec<String> = problems_of(&baseline)
        .into_iter()
        .map(|problem| format!("without a fault: {problem}"))
        .collect();
    if baseline.returned_err || !baseline.deleter_failures.is_empty() {
        problems.push(format!(
            "without a fault the scenario must succeed cleanly:\n{}",
            tail(&baseline.stdout, 20)
        ));
    }
    let Some(calls) = baseline.report.as_ref().map(|report| report.calls.clone()) else {
        panic!(
            "{}: the run without a fault wrote no report\n{}\n{}",
            scenario.name, baseline.stdout, baseline.stderr
        );
    };
    assert!(
        baseline.passed,
        "{}: the run without a fault failed: {problems:#?}\n{}\n{}",
        scenario.name,
        tail(&baseline.stdout, 40),
        tail(&baseline.stderr, 20)
    );
    let faults: Vec<(&str, u64)> = calls
        .iter()
        .flat_map(|(function, count)| (1..=*count).map(move |n| (function.as_str(), n)))
        .collect();
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&fault) = faults.get(index) else {
                        break;
                    };
                    let outcome = run_child(scenario, Some(fault), &scratch, index + 1);
                    outcomes.lock().unwrap().push(outcome);
                }
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.sort_by(|a, b| a.fault.cmp(&b.fault));

    let (mut errs, mut reported, mut unnoticed, mut left) = (0, 0, Vec::new(), Vec::new());
    let mut own_checks = 0;
    for outcome in &outcomes {
        let (function, n) = outcome.fault.clone().expect("a faulted run");
        for problem in problems_of(outcome) {
            problems.push(format!("{function}:{n}: {problem}"));
        }
        if outcome.returned_err {
            errs += 1;
        } else if !outcome.deleter_failures.is_empty() {
            reported += 1;
        } else if outcome.own_check_failed {
            own_checks += 1;
        } else {
            unnoticed.push(format!("{function}:{n}"));
        }
        if let Some(report) = &outcome.report
            && !report.leaks.is_empty()
            && unexplained_leaks(outcome, report).is_empty()
        {
            left.push(format!(
                "{function}:{n} ({})",
                simulator::describe_leaks(&report.leaks)
            ));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    say(format!(
        "fault sweep: {}: {} calls ({} functions) failed one at a time in {seconds:.1} s: {errs} Err, \
         {reported} Ok with a deleter failure reported, {own_checks} in the child's own final check, \
         {} Ok unnoticed{}; {}",
        scenario.name,
        outcomes.len(),
        calls.len(),
        unnoticed.len(),
        if unnoticed.is_empty() {
            String::new()
        } else {
            format!(" ({})", unnoticed.join(", "))
        },
        if problems.is_empty() {
            "no panic, no violation, no leak".to_string()
        } else {
            format!("{} PROBLEM(S)", problems.len())
        }
    ));
    if !left.is_empty() {
        say(format!(
            "    {}: resources left to the driver after a failed deleter call, reported through the hook: {}",
            scenario.name,
            left.join(", ")
        ));
    }
    for problem in &problems {
        say(format!("    PROBLEM {}: {problem}", scenario.name));
    }
    assert!(
        problems.is_empty(),
        "{}: {} problem(s):\n{}",
        scenario.name,
        problems.len(),
        problems.join("\n")
    );
}
