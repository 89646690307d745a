//! A tour of handles-cuda on a real GPU: a pool allocation, a memset and a copy timed with
//! events, a kernel from the checked-in PTX launched directly and replayed from a captured
//! graph, and an IPC round trip with a child process. Prints each step of the lifecycle.
//!
//! Run with `cargo run -p handles-cuda --example tour`. Without an NVIDIA driver it runs itself
//! on the checking simulator (`cuda-sim`, strict mode), says so first, and ends with the
//! simulator's verdict (`examples/common`). Where a driver exists it never loads the simulator.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::process::Command;

use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, EventHandle, KernelHandle, LaunchConfig, LibraryHandle,
    MemoryPoolHandle, PoolProps, StreamFlags, StreamHandle,
    code::Buffer,
    exec::EventFlags,
    graph::{CaptureMode, GraphHandle},
    ipc::IpcPointer,
};

/// Hand-written PTX, checked in: the tour needs no compiler.
const PTX: &str = include_str!("../../tests/kernels/test_kernels.ptx");

const SIZE: usize = 64 << 20;

mod common;

fn main() {
    common::driver_or_simulator("tour");
    let result = if std::env::args().nth(1).as_deref() == Some("--import") {
        child()
    } else {
        parent()
    };
    if let Err(error) = result {
        eprintln!("tour failed: {error}");
        std::process::exit(1);
    }
}

fn parent() -> handles_cuda::Result<()> {
    handles_cuda::driver::ensure_loaded()?;
    common::simulated_note();
    println!("devices: {}", handles_cuda::driver::device_count()?);
    let context = ContextHandle::primary(0)?;
    println!("context   {context:?}");
    let stream = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0)?;
    println!("stream    {stream:?}");
    let pool = MemoryPoolHandle::create(&PoolProps {
        ipc: true,
        ..PoolProps::device(0)
    })?;
    println!("pool      {pool:?} (IPC-capable)");
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, SIZE, &stream)?;
    println!("buffer    {buffer:?}, {} MiB from the pool", SIZE >> 20);

    let (start, end) = (
        EventHandle::create(&context, EventFlags::timing())?,
        EventHandle::create(&context, EventFlags::timing())?,
    );
    start.record(&stream)?;
    buffer.memset_async(0x5a, SIZE, &stream)?;
    end.record(&stream)?;
    end.synchronize()?;
    let ms = start.elapsed_ms(&end)?;
    if common::on_the_simulator() {
        // Logical time: a duration or a bandwidth from it would mean nothing.
        println!(
            "memset    {} MiB between two timing events; no time shown (the simulator's clock \
             is logical)",
            SIZE >> 20
        );
    } else {
        println!(
            "memset    {} MiB in {ms:.3} ms ({:.0} GB/s)",
            SIZE >> 20,
            SIZE as f64 / ms as f64 / 1e6
        );
    }
    kernels(&context, &stream, &pool)?;

    let greeting = b"hello from the parent process";
    buffer.copy_from_host(greeting, &stream)?;

    let pointer = buffer.export_ipc()?;
    let fd = pool.export_posix_fd()?;
    // SAFETY: clears close-on-exec on a descriptor we own, so the child inherits it.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) };
    println!(
        "ipc       exported the pool as fd {} and the buffer as {} bytes",
        fd.as_raw_fd(),
        IpcPointer::LEN
    );
    let hex: String = pointer
        .to_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let status = Command::new(std::env::current_exe().expect("own path"))
        .args(["--import", &fd.as_raw_fd().to_string(), &hex])
        .status()
        .expect("spawn the child");
    println!("ipc       child exited with {status}");

    println!("dropping the context, pool and stream handles first:");
    drop((context, pool));
    println!(
        "  buffer still owns its pool: {:?}",
        buffer.pool().as_ref().map(|p| p.strong_count())
    );
    drop(stream);
    println!("dropping the buffer: freed on its stream, then the stream, pool and context go");
    drop(buffer);
    handles_cuda::exec::clear_primary_cache();
    println!("done");
    Ok(())
}

/// `add_one` launched once, then captured into a graph and replayed 100 times.
fn kernels(
    context: &ContextHandle,
    stream: &StreamHandle,
    pool: &MemoryPoolHandle,
) -> handles_cuda::Result<()> {
    const N: u32 = 1 << 20;
    let library = LibraryHandle::load_ptx(PTX)?;
    let kernel = KernelHandle::get(&library, "add_one")?;
    println!("kernel    {kernel:?}");
    // SAFETY: `add_one(data, n)` adds 1 to the first `n` 32-bit elements of `data` and
    // touches nothing else; the check makes sure they fit.
    let add_one = unsafe {
        kernel.typed::<(Buffer, u32)>(|args: &(&DevicePtrHandle, u32), _| {
            if args.1 as usize * 4 <= args.0.size() {
                Ok(())
            } else {
                Err(Error::InvalidArgument(
                    "more elements than the buffer holds".into(),
                ))
            }
        })?
    };
    let counts = DevicePtrHandle::alloc_from_pool(pool, N as usize * 4, stream)?;
    counts.memset_async(0, N as usize * 4, stream)?;
    let config = LaunchConfig::linear(N, 256);
    add_one.launch(stream, &config, (&counts, N))?;
    let graph = GraphHandle::capture(context, CaptureMode::Global, |capture| {
        capture.launch(&add_one, &config, (&counts, N))
    })?;
    let exec = graph.instantiate()?;
    drop((graph, add_one, kernel, library)); // the executable graph keeps what it needs
    let (start, end) = (
        EventHandle::create(context, EventFlags::timing())?,
        EventHandle::create(context, EventFlags::timing())?,
    );
    let host_start = std::time::Instant::now();
    start.record(stream)?;
    for _ in 0..100 {
        exec.launch(stream)?;
    }
    end.record(stream)?;
    let queued = host_start.elapsed();
    end.synchronize()?;
    let ms = start.elapsed_ms(&end)?;
    let mut first = [0u8; 4];
    counts.copy_to_host(&mut first, stream)?;
    let mut last = [0u8; 4];
    counts.copy_to_host_at((N as usize - 1) * 4, &mut last, stream)?;
    let (first, last) = (u32::from_ne_bytes(first), u32::from_ne_bytes(last));
    // On the simulator kernels run on the CPU and the events' times are logical: no times.
    let times = if common::on_the_simulator() {
        String::new()
    } else {
        format!(
            " ({:.1} us per replay on the GPU, {:.1} us to queue each)",
            ms as f64 * 1000.0 / 100.0,
            queued.as_secs_f64() * 1e6 / 100.0
        )
    };
    println!(
        "graph     add_one over {N} elements: 1 launch + 100 graph replays -> {first} and {last} \
         (expected 101): {}{times}",
        if first == 101 && last == 101 {
            "ok"
        } else {
            "WRONG"
        },
    );
    if first != 101 || last != 101 {
        return Err(Error::InvalidArgument(
            "the graph replays computed a wrong result".into(),
        ));
    }
    Ok(())
}

fn child() -> handles_cuda::Result<()> {
    let mut args = std::env::args().skip(2);
    let fd: i32 = args
        .next()
        .and_then(|a| a.parse().ok())
        .expect("fd argument");
    let hex = args.next().expect("payload argument");
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect();
    // SAFETY: the parent keeps the descriptor open for the child's lifetime.
    let pool = MemoryPoolHandle::import_posix_fd(unsafe { BorrowedFd::borrow_raw(fd) }, 0)?;
    let context = ContextHandle::primary(0)?;
    let stream = StreamHandle::create(&context, StreamFlags::default(), 0)?;
    let pointer = IpcPointer::from_bytes(&bytes)?;
    let first = DevicePtrHandle::import_ipc(&pool, &pointer, &stream)?;
    let second = DevicePtrHandle::import_ipc(&pool, &pointer, &stream)?;
    println!(
        "  child   imported twice: one shared handle? {}",
        first.ptr_eq(&second)
    );
    let mut text = vec![0u8; 29];
    second.copy_to_host(&mut text, &stream)?;
    println!("  child   read {:?}", String::from_utf8_lossy(&text));
    Ok(())
}
