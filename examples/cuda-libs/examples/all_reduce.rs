//! An all-reduce across every GPU of the machine through NCCL (one communicator per device,
//! `ncclCommInitAll`), checked, then the communicators, streams and contexts dropped in an
//! adversarial order; then the same sum with one thread per rank, and with one process per
//! rank, joining by a shared id (`ncclCommInitRank`). Needs two or more GPUs; with fewer, without a driver or without NCCL it
//! says so in one sentence and exits with 0.
//!
//! `cargo run -p handles-cuda-libs --example all_reduce`

use handles_cuda::{ContextHandle, DevicePtrHandle, StreamFlags, StreamHandle};
use handles_cuda_libs::{LibError, NcclCommHandle, NcclUniqueId, all_reduce_sum_f32};

const COUNT: usize = 1 << 20;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if args.first().map(String::as_str) == Some("--rank") {
        rank_process(&args)
    } else {
        run()
    };
    match result {
        Ok(()) => {}
        Err(LibError::Cuda(handles_cuda::Error::DriverNotFound)) => {
            println!("No NVIDIA driver was found on this machine, so there is nothing to reduce.");
        }
        Err(LibError::Missing(library)) => {
            println!("{library} is not installed on this machine, so there is nothing to reduce.");
        }
        Err(error) => {
            eprintln!("all_reduce failed: {error}");
            std::process::exit(1);
        }
    }
}

fn run() -> Result<(), LibError> {
    let devices = handles_cuda::driver::device_count()?;
    if devices < 2 {
        println!(
            "This machine has {devices} GPU(s); an all-reduce needs two, so there is nothing to reduce."
        );
        return Ok(());
    }
    println!("NCCL {} over {devices} GPUs", NcclCommHandle::version()?);
    let streams = (0..devices)
        .map(|ordinal| {
            let context = ContextHandle::primary(ordinal)?;
            StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let comms = NcclCommHandle::init_all(&streams)?;
    // Rank r sends r + 1 in every element; the sum is 1 + 2 + ... + devices.
    let mut sends = Vec::new();
    let mut recvs = Vec::new();
    for (rank, comm) in comms.iter().enumerate() {
        let send = DevicePtrHandle::alloc(comm.context(), COUNT * 4)?;
        let value = (rank + 1) as f32;
        let bytes: Vec<u8> = std::iter::repeat_n(value.to_ne_bytes(), COUNT)
            .flatten()
            .collect();
        send.copy_from_host(&bytes, comm.stream())?;
        sends.push(send);
        recvs.push(DevicePtrHandle::alloc(comm.context(), COUNT * 4)?);
    }
    let (send_refs, recv_refs): (Vec<_>, Vec<_>) = sends.iter().zip(&recvs).unzip();
    all_reduce_sum_f32(&comms, &send_refs, &recv_refs, COUNT)?;
    let expected = (1..=devices).sum::<usize>() as f32;
    for (rank, (recv, comm)) in recvs.iter().zip(&comms).enumerate() {
        let mut bytes = vec![0u8; COUNT * 4];
        recv.copy_to_host(&mut bytes, comm.stream())?;
        let wrong = bytes
            .chunks_exact(4)
            .filter(|x| f32::from_ne_bytes((*x).try_into().unwrap()) != expected)
            .count();
        println!(
            "rank {rank}: {} of {COUNT} elements are {expected}",
            COUNT - wrong
        );
        if wrong != 0 {
            return Err(LibError::InvalidArgument(format!(
                "rank {rank}: {wrong} elements differ"
            )));
        }
    }
    // Adversarial order: the streams and the contexts first, then the buffers, then the
    // communicators last rank first; each communicator keeps its stream and context alive.
    drop(streams);
    handles_cuda::exec::clear_primary_cache();
    drop((send_refs, recv_refs));
    drop(sends);
    let mut comms = comms;
    while let Some(comm) = comms.pop() {
        println!("dropping rank {} of {}", comm.rank(), comm.world_size());
        drop(comm);
    }
    drop(recvs);
    by_rank(devices)?;
    by_process(devices)?;
    println!("done");
    Ok(())
}

/// The same sum with one thread per rank, each joining by a shared id (`ncclCommInitRank`).
fn by_rank(devices: usize) -> Result<(), LibError> {
    let bytes = NcclUniqueId::new()?.to_bytes();
    let results: Vec<Result<(), LibError>> = std::thread::scope(|scope| {
        let ranks: Vec<_> = (0..devices)
            .map(|rank| scope.spawn(move || one_rank("thread", rank, devices, &bytes)))
            .collect();
        ranks
            .into_iter()
            .map(|rank| rank.join().expect("a rank thread panicked"))
            .collect()
    });
    results.into_iter().collect()
}

/// The same sum with one process per rank: this process is rank 0 and starts the others,
/// handing them the id's 128 bytes (in hex, on the command line), as separate services would
/// over a socket.
fn by_process(devices: usize) -> Result<(), LibError> {
    let bytes = NcclUniqueId::new()?.to_bytes();
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    let children: Vec<_> = (1..devices)
        .map(|rank| {
            std::process::Command::new(std::env::current_exe().expect("own path"))
                .args(["--rank", &rank.to_string(), "--id", &hex])
                .spawn()
                .expect("start a rank process")
        })
        .collect();
    let mine = one_rank("process", 0, devices, &bytes);
    for mut child in children {
        let status = child.wait().expect("wait for a rank process");
        if !status.success() {
            return Err(LibError::InvalidArgument(format!(
                "a rank process exited with {status}"
            )));
        }
    }
    mine
}

/// Rank `rank`'s part: join, sum its (rank + 1) values with the others', check.
fn one_rank(how: &str, rank: usize, devices: usize, id: &[u8; 128]) -> Result<(), LibError> {
    let expected = (1..=devices).sum::<usize>() as f32;
    let context = ContextHandle::primary(rank)?;
    let stream = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0)?;
    let comm = NcclCommHandle::init_rank(&NcclUniqueId::from_bytes(id), rank, devices, &stream)?;
    let send = DevicePtrHandle::alloc(&context, COUNT * 4)?;
    let value = (rank + 1) as f32;
    let host: Vec<u8> = std::iter::repeat_n(value.to_ne_bytes(), COUNT)
        .flatten()
        .collect();
    send.copy_from_host(&host, &stream)?;
    let recv = DevicePtrHandle::alloc(&context, COUNT * 4)?;
    all_reduce_sum_f32(std::slice::from_ref(&comm), &[&send], &[&recv], COUNT)?;
    let mut back = vec![0u8; COUNT * 4];
    recv.copy_to_host(&mut back, &stream)?;
    let wrong = back
        .chunks_exact(4)
        .filter(|x| f32::from_ne_bytes((*x).try_into().unwrap()) != expected)
        .count();
    println!(
        "by {how}: rank {rank} of {devices}: {} of {COUNT} elements are {expected}",
        COUNT - wrong
    );
    if wrong != 0 {
        return Err(LibError::InvalidArgument(format!(
            "rank {rank}: {wrong} differ"
        )));
    }
    Ok(())
}

/// A rank process started by [`by_process`]: `--rank R --id HEX`.
fn rank_process(args: &[String]) -> Result<(), LibError> {
    let bad = || LibError::InvalidArgument("usage: --rank R --id HEX".into());
    let rank: usize = args.get(1).and_then(|r| r.parse().ok()).ok_or_else(bad)?;
    let hex = args.get(3).filter(|hex| hex.len() == 256).ok_or_else(bad)?;
    let mut id = [0u8; 128];
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    one_rank("process", rank, handles_cuda::driver::device_count()?, &id)
}
