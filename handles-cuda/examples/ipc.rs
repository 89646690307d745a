//! Sharing pool memory with another process: the parent allocates a buffer from an
//! IPC-capable pool and fills it, then sends the pool's descriptor and the buffer's export
//! token to a child process over a Unix socket; the child imports both and reads the bytes.
//!
//! Run with `cargo run -p handles-cuda --example ipc`. Without an NVIDIA driver it runs itself
//! on the checking simulator (strict mode) and ends with its verdict.

use std::error::Error;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};

use handles_cuda::{
    ContextHandle, DevicePtrHandle, MemoryPoolHandle, PoolProps, StreamFlags, StreamHandle,
    ipc::{IpcPointer, receive_fd, send_fd},
};

const LEN: usize = 1 << 20;

fn pattern() -> Vec<u8> {
    (0..LEN).map(|i| (i % 251) as u8).collect()
}

mod common;

fn main() {
    common::driver_or_simulator("IPC example");
    let result = match std::env::args().nth(1).as_deref() {
        Some("--child") => child(),
        _ => parent(),
    };
    if let Err(error) = result {
        eprintln!("ipc example failed: {error}");
        std::process::exit(1);
    }
}

/// Allocates and fills a buffer, starts the child with one end of a socket pair as its
/// standard input, and sends it the pool's descriptor and the buffer's token.
fn parent() -> Result<(), Box<dyn Error>> {
    common::simulated_note();
    let context = ContextHandle::primary(0)?;
    let stream = StreamHandle::create(&context, StreamFlags::default(), 0)?;
    let pool = MemoryPoolHandle::create(&PoolProps {
        ipc: true,
        ..PoolProps::device(0)
    })?;
    let buffer = DevicePtrHandle::alloc_from_pool(&pool, LEN, &stream)?;
    buffer.copy_from_host(&pattern(), &stream)?;
    stream.synchronize()?;

    let (socket, child_end) = UnixStream::pair()?;
    let child = Command::new(std::env::current_exe()?)
        .arg("--child")
        .stdin(Stdio::from(OwnedFd::from(child_end)))
        .spawn()?;
    let pool_fd = pool.export_posix_fd()?;
    send_fd(&socket, pool_fd.as_fd(), &buffer.export_ipc()?.to_bytes())?;
    let status = child.wait_with_output()?.status;
    if !status.success() {
        return Err(format!("the child exited with {status}").into());
    }
    // The buffer stays alive (and allocated) until the child is done with it.
    drop(buffer);
    handles_cuda::exec::clear_primary_cache();
    Ok(())
}

/// Receives the pool's descriptor and the token on standard input, imports both, and checks
/// the bytes.
fn child() -> Result<(), Box<dyn Error>> {
    let socket = UnixStream::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let (pool_fd, bytes) = receive_fd(&socket, IpcPointer::LEN)?;
    let pointer = IpcPointer::from_bytes(&bytes)?;
    let context = ContextHandle::primary(0)?;
    let stream = StreamHandle::create(&context, StreamFlags::default(), 0)?;
    let pool = MemoryPoolHandle::import_posix_fd(pool_fd.as_fd(), 0)?;
    let buffer = DevicePtrHandle::import_ipc(&pool, &pointer, &stream)?;
    let mut back = vec![0; LEN];
    buffer.copy_to_host(&mut back, &stream)?;
    if back != pattern() {
        return Err("the child read different bytes than the parent wrote".into());
    }
    println!(
        "child: imported {} bytes of the parent's pool memory over a Unix socket and read them back intact",
        buffer.size()
    );
    drop((buffer, pool));
    handles_cuda::exec::clear_primary_cache();
    Ok(())
}
