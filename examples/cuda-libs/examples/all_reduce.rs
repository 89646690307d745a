//! An all-reduce across every GPU of the machine through NCCL (one communicator per device,
//! `ncclCommInitAll`), checked, then the communicators, streams and contexts dropped in an
//! adversarial order; then the same sum with one thread per rank joining by a shared id
//! (`ncclCommInitRank`). Needs two or more GPUs; with fewer, without a driver or without NCCL it
//! says so in one sentence and exits with 0.
//!
//! `cargo run -p handles-cuda-libs --example all_reduce`

use handles_cuda::{ContextHandle, DevicePtrHandle, StreamFlags, StreamHandle};
use handles_cuda_libs::{LibError, NcclCommHandle, NcclUniqueId, all_reduce_sum_f32};

const COUNT: usize = 1 << 20;

fn main() {
    match run() {
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
    let devices = handles_cuda::device_count()?;
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
    handles_cuda::clear_primary_cache();
    drop((send_refs, recv_refs));
    drop(sends);
    let mut comms = comms;
    while let Some(comm) = comms.pop() {
        println!("dropping rank {} of {}", comm.rank(), comm.world_size());
        drop(comm);
    }
    drop(recvs);
    by_rank(devices)?;
    println!("done");
    Ok(())
}

/// The same sum with one thread per rank, each joining by a shared id (`ncclCommInitRank`),
/// as separate processes would after sending the id's bytes to each other.
fn by_rank(devices: usize) -> Result<(), LibError> {
    let id = NcclUniqueId::new()?;
    let bytes = id.to_bytes();
    let expected = (1..=devices).sum::<usize>() as f32;
    let results: Vec<Result<(), LibError>> = std::thread::scope(|scope| {
        let ranks: Vec<_> = (0..devices)
            .map(|rank| {
                scope.spawn(move || -> Result<(), LibError> {
                    let context = ContextHandle::primary(rank)?;
                    let stream =
                        StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0)?;
                    let id = NcclUniqueId::from_bytes(&bytes);
                    let comm = NcclCommHandle::init_rank(&id, rank, devices, &stream)?;
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
                        "by rank: rank {rank} of {devices}: {} of {COUNT} elements are {expected}",
                        COUNT - wrong
                    );
                    if wrong != 0 {
                        return Err(LibError::InvalidArgument(format!(
                            "rank {rank}: {wrong} differ"
                        )));
                    }
                    Ok(())
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|rank| rank.join().expect("a rank thread panicked"))
            .collect()
    });
    results.into_iter().collect()
}
