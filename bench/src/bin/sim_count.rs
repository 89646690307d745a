//! A fixed amount of one operation, for instruction counts on the simulated driver, which do
//! not drift: `sim_count N OP` makes and drops `N` objects (`event`, `pool`: a 1 KiB pool
//! allocation, `stream`), and the per-operation count is the difference between two values
//! of `N`, divided by their difference. See BENCHMARKS.md for the command.

use handles_cuda::{
    ContextHandle, DevicePtrHandle, EventHandle, MemoryPoolHandle, PoolProps, StreamFlags,
    StreamHandle, exec::EventFlags,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(n), Some(op)) = (args.next(), args.next()) else {
        return Err("usage: sim_count N event|pool|stream".into());
    };
    let n: usize = n.parse()?;
    let context = ContextHandle::primary(0)?;
    let flags = StreamFlags { non_blocking: true };
    let stream = StreamHandle::create(&context, flags, 0)?;
    let pool = MemoryPoolHandle::create(&PoolProps::device(0))?;
    for _ in 0..n {
        match op.as_str() {
            "event" => drop(EventHandle::create(&context, EventFlags::default())?),
            "pool" => drop(DevicePtrHandle::alloc_from_pool(&pool, 1024, &stream)?),
            "stream" => drop(StreamHandle::create(&context, flags, 0)?),
            other => return Err(format!("unknown operation {other}").into()),
        }
    }
    stream.synchronize()?;
    Ok(())
}
