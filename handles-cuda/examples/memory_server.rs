//! A multi-process memory server: the server owns an IPC-capable pool and one buffer per
//! worker. Each worker process receives the pool's descriptor and its buffer's export token over
//! a Unix socket (`SCM_RIGHTS`), imports both, writes its rows with a kernel, and reports a
//! checksum back. The server waits for every worker to exit, checks every buffer against the
//! reports and against what each worker should have written, and frees them.
//!
//! Run with `cargo run -p handles-cuda --example memory_server`. Without an NVIDIA driver it runs
//! itself (and its workers) on the checking simulator, strict mode, and ends with the
//! simulator's verdict.

use std::error::Error;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};

use handles_cuda::code::{Elements, ProgramHandle};
use handles_cuda::ipc::{IpcPointer, receive_fd, send_fd};
use handles_cuda::{
    ContextHandle, DeviceBuffer, KernelHandle, LaunchConfig, LibraryHandle, MemoryPoolHandle,
    PoolProps, StreamFlags, StreamHandle,
};

mod common;

const WORKERS: u32 = 3;
/// `u32` elements per worker's buffer.
const ROWS: usize = 1 << 18;

/// What worker `id` writes: element `i` becomes `id * 2^24 + i * 7 mod 2^24`, with a kernel.
const SOURCE: &str = r#"
extern "C" __global__ void fill(unsigned *rows, unsigned id, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) rows[i] = (id << 24) | ((i * 7u) & 0xffffffu);
}
"#;

fn expected(id: u32, i: usize) -> u32 {
    (id << 24) | ((i as u32).wrapping_mul(7) & 0xff_ffff)
}

/// The report a worker sends back, with its id: the sum of the rows it wrote.
fn checksum(rows: &[u32]) -> u64 {
    rows.iter().map(|&v| v as u64).sum()
}

fn main() {
    common::driver_or_simulator("memory server");
    let result = match std::env::args().nth(1).as_deref() {
        Some("--worker") => worker(),
        _ => server(),
    };
    if let Err(error) = result {
        eprintln!("memory server failed: {error}");
        std::process::exit(1);
    }
}

fn server() -> Result<(), Box<dyn Error>> {
    common::simulated_note();
    let context = ContextHandle::primary(0)?;
    let stream = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0)?;
    let pool = MemoryPoolHandle::create(&PoolProps {
        ipc: true,
        ..PoolProps::device(0)
    })?;
    let buffers = (0..WORKERS)
        .map(|_| DeviceBuffer::<u32>::alloc_from_pool(&pool, ROWS, &stream))
        .collect::<handles_cuda::Result<Vec<_>>>()?;
    // The allocations must be complete before another process touches them.
    stream.synchronize()?;
    println!(
        "server    an IPC pool with {WORKERS} buffers of {ROWS} u32 each; starting {WORKERS} workers"
    );

    let mut workers: Vec<(u32, Child, UnixStream)> = Vec::new();
    for id in 0..WORKERS {
        let (socket, worker_end) = UnixStream::pair()?;
        let child = Command::new(std::env::current_exe()?)
            .arg("--worker")
            .stdin(Stdio::from(OwnedFd::from(worker_end)))
            .spawn()?;
        let mut payload = id.to_le_bytes().to_vec();
        payload.extend_from_slice(&buffers[id as usize].as_bytes().export_ipc()?.to_bytes());
        // A descriptor of the pool for each worker, sent and then closed here.
        send_fd(&socket, pool.export_posix_fd()?.as_fd(), &payload)?;
        workers.push((id, child, socket));
    }

    let mut reports = Vec::new();
    for (id, child, mut socket) in workers {
        let mut report = [0u8; 12];
        let read = socket.read_exact(&mut report);
        let status = child.wait_with_output()?.status;
        read.map_err(|e| format!("worker {id} sent no report ({status}): {e}"))?;
        if !status.success() {
            return Err(format!("worker {id} exited with {status}").into());
        }
        let reported_id = u32::from_le_bytes(report[..4].try_into()?);
        let sum = u64::from_le_bytes(report[4..].try_into()?);
        if reported_id != id {
            return Err(format!("worker {id} reported as worker {reported_id}").into());
        }
        println!("server    worker {id} exited: reported checksum {sum:#x}");
        reports.push(sum);
    }

    // Every worker has exited, so nothing outside this process maps the buffers any more.
    for (id, buffer) in buffers.iter().enumerate() {
        let rows = buffer.to_vec(&stream)?;
        let wrong = (0..ROWS)
            .filter(|&i| rows[i] != expected(id as u32, i))
            .count();
        if wrong != 0 || checksum(&rows) != reports[id] {
            return Err(format!(
                "buffer {id}: {wrong} rows differ from what worker {id} should have written"
            )
            .into());
        }
    }
    println!("server    all {WORKERS} buffers hold exactly what their workers wrote and reported");
    drop(buffers);
    drop(pool);
    println!("server    buffers freed on their stream, then the pool; done");
    handles_cuda::exec::clear_primary_cache();
    Ok(())
}

/// Receives the pool's descriptor, its id and its buffer's token on standard input, imports
/// them, writes its rows with a kernel, and reports the checksum of what it reads back.
fn worker() -> Result<(), Box<dyn Error>> {
    let mut socket = UnixStream::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let (pool_fd, payload) = receive_fd(&socket, 4 + IpcPointer::LEN)?;
    if payload.len() != 4 + IpcPointer::LEN {
        return Err(format!("a payload of {} bytes", payload.len()).into());
    }
    let id = u32::from_le_bytes(payload[..4].try_into()?);
    let pointer = IpcPointer::from_bytes(&payload[4..])?;
    let context = ContextHandle::primary(0)?;
    let stream = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0)?;
    let pool = MemoryPoolHandle::import_posix_fd(pool_fd.as_fd(), 0)?;
    drop(pool_fd);
    let imported = handles_cuda::DevicePtrHandle::import_ipc(&pool, &pointer, &stream)?;
    let rows = DeviceBuffer::<u32>::from_bytes(&imported)?;
    drop(imported);

    let program = ProgramHandle::new(SOURCE, "fill.cu")?;
    program.compile(&["--gpu-architecture=compute_90"])?;
    let library = LibraryHandle::load_data(&program.ptx()?)?;
    // SAFETY: fill(rows, id, n) writes rows[i] for i < n only; the check keeps n within rows.
    let fill = unsafe {
        KernelHandle::get(&library, "fill")?.typed::<(Elements<u32>, u32, u32)>(
            |(rows, _, n): &(&DeviceBuffer<u32>, u32, u32), _| {
                if *n as usize <= rows.len() {
                    Ok(())
                } else {
                    Err(handles_cuda::Error::InvalidArgument(
                        "n exceeds the buffer".into(),
                    ))
                }
            },
        )?
    };
    fill.launch(
        &stream,
        &LaunchConfig::linear(ROWS as u32, 256),
        (&rows, id, ROWS as u32),
    )?;
    let written = rows.to_vec(&stream)?;
    let sum = checksum(&written);
    println!(
        "  worker {id} imported {} bytes of the server's pool, wrote {ROWS} rows with a kernel",
        rows.as_bytes().size()
    );
    // The import is unmapped (after the kernel, on its stream) before the report, so the
    // server never frees memory that a worker still maps.
    drop((rows, fill, library, pool));
    stream.synchronize()?;
    let mut report = id.to_le_bytes().to_vec();
    report.extend_from_slice(&sum.to_le_bytes());
    socket.write_all(&report)?;
    handles_cuda::exec::clear_primary_cache();
    Ok(())
}
