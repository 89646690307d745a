//! An inference-style pipeline: batches go up through pinned staging memory on a copy stream,
//! a captured graph (two kernels compiled with NVRTC) runs on a compute stream, and the results
//! come back the same way. Two slots alternate, so one batch uploads while the previous one
//! computes; the streams hand off through recycled events. Every result is checked against the
//! same computation on the host.
//!
//! Run with `cargo run -p handles-cuda --example pipeline`. Without an NVIDIA driver it runs
//! itself on the checking simulator (strict mode) and ends with the simulator's verdict.

use std::collections::BTreeSet;

use handles_cuda::code::{Elements, ProgramHandle, TypedKernel};
use handles_cuda::exec::{EventFlags, EventRecycler};
use handles_cuda::graph::{CaptureMode, GraphExecHandle, GraphHandle};
use handles_cuda::{
    ContextHandle, DeviceBuffer, Error, KernelHandle, LaunchConfig, LibraryHandle, StreamFlags,
    StreamHandle,
};

mod common;

/// Elements per batch.
const N: usize = 1 << 16;
const BATCHES: usize = 16;
const SLOTS: usize = 2;

/// Two layers of a toy model: `hidden = x * w + bias`, then a leaky ReLU.
const SOURCE: &str = r#"
extern "C" __global__ void affine(const float *x, const float *w, float *hidden, float bias,
                                  unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) hidden[i] = x[i] * w[i] + bias;
}
extern "C" __global__ void leaky_relu(const float *hidden, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = hidden[i] > 0.0f ? hidden[i] : 0.125f * hidden[i];
}
"#;
const BIAS: f32 = -0.25;

type Affine = (Elements<f32>, Elements<f32>, Elements<f32>, f32, u32);
type Relu = (Elements<f32>, Elements<f32>, u32);

/// One slot of the pipeline: its pinned staging, its device buffers, and the graph captured over
/// them.
struct Slot {
    staging_in: DeviceBuffer<f32>,
    staging_out: DeviceBuffer<f32>,
    graph: GraphExecHandle,
}

fn main() {
    common::driver_or_simulator("pipeline");
    if let Err(error) = run() {
        eprintln!("pipeline failed: {error}");
        std::process::exit(1);
    }
}

fn run() -> handles_cuda::Result<()> {
    common::simulated_note();
    let context = ContextHandle::primary(0)?;
    let copies = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0)?;
    let compute = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0)?;
    let (affine, relu) = compile()?;
    println!("compiled  affine and leaky_relu with NVRTC");

    let weights: Vec<f32> = (0..N).map(|i| ((i % 7) as f32 - 3.0) * 0.5).collect();
    let w = DeviceBuffer::from_slice(&weights, &copies)?;
    let config = LaunchConfig::linear(N as u32, 256);
    let mut slots = Vec::new();
    for _ in 0..SLOTS {
        let x = DeviceBuffer::<f32>::alloc_async(N, &copies)?;
        let hidden = DeviceBuffer::<f32>::alloc_async(N, &copies)?;
        let y = DeviceBuffer::<f32>::alloc_async(N, &copies)?;
        // The allocations are ordered on `copies`; every replay waits for `copies` (an event
        // below), and this wait makes them complete before anything else may touch them.
        copies.synchronize()?;
        let graph = GraphHandle::capture(&context, CaptureMode::Global, |capture| {
            capture.launch(&affine, &config, (&x, &w, &hidden, BIAS, N as u32))?;
            capture.launch(&relu, &config, (&hidden, &y, N as u32))
        })?;
        let graph = graph.instantiate()?;
        // The executable graph keeps x, hidden, y, w and the kernels' library alive: `hidden`
        // and `w` are dropped here, `x` and `y` stay for the copies.
        slots.push((
            Slot {
                staging_in: DeviceBuffer::alloc_host(&context, N)?,
                staging_out: DeviceBuffer::alloc_host(&context, N)?,
                graph,
            },
            x,
            y,
        ));
    }
    drop(w);
    println!(
        "captured  {SLOTS} graphs of 2 kernels over {N} elements each; the graphs keep the buffers"
    );

    let events = EventRecycler::new(&context, EventFlags::default())?;
    let mut seen_events = BTreeSet::new();
    let mut handoffs = 0;
    let mut checked = 0;
    for batch in 0..BATCHES + 1 {
        // Queue batch `batch` (while the previous one may still compute) ...
        if batch < BATCHES {
            let (slot, x, _) = &slots[batch % SLOTS];
            slot.staging_in.copy_from(&input(batch), &copies)?;
            slot.staging_in.copy_to_device(x, &copies)?;
            let uploaded = events.acquire()?;
            uploaded.record(&copies)?;
            compute.wait_event(&uploaded)?;
            slot.graph.launch(&compute)?;
            let computed = events.acquire()?;
            computed.record(&compute)?;
            copies.wait_event(&computed)?;
            seen_events.extend([uploaded.raw() as usize, computed.raw() as usize]);
            handoffs += 2;
        }
        // ... then bring back and check the previous one.
        if batch > 0 {
            let done = batch - 1;
            let (slot, _, y) = &slots[done % SLOTS];
            y.copy_to_device(&slot.staging_out, &copies)?;
            let result = slot.staging_out.to_vec(&copies)?;
            let expected = reference(&input(done), &weights);
            if result != expected {
                return Err(Error::InvalidArgument(format!(
                    "batch {done}: the GPU's result differs from the host's"
                )));
            }
            checked += 1;
            if done < 2 || done == BATCHES - 1 {
                println!(
                    "batch {done:>2}  y[0..4] = {:?}: matches the host",
                    &result[..4]
                );
            }
        }
    }
    println!(
        "checked   {checked} of {BATCHES} batches; {handoffs} stream handoffs used {} distinct \
         recycled events",
        seen_events.len()
    );
    drop(slots);
    handles_cuda::exec::clear_recycled_events();
    handles_cuda::exec::clear_primary_cache();
    println!("done");
    Ok(())
}

/// Compiles both kernels and types them: each bound check keeps `n` within every buffer.
fn compile() -> handles_cuda::Result<(TypedKernel<Affine>, TypedKernel<Relu>)> {
    let program = ProgramHandle::new(SOURCE, "model.cu")?;
    // No fused multiply-add, so the device rounds as the host reference does.
    program.compile(&["--gpu-architecture=compute_90", "--fmad=false"])?;
    let library = LibraryHandle::load_data(&program.ptx()?)?;
    // SAFETY: affine(x, w, hidden, bias, n) reads x[i] and w[i] and writes hidden[i] for
    // i < n only; the check keeps n within all three.
    let affine = unsafe {
        KernelHandle::get(&library, "affine")?.typed::<Affine>(
            |(x, w, hidden, _, n): &(
                &DeviceBuffer<f32>,
                &DeviceBuffer<f32>,
                &DeviceBuffer<f32>,
                f32,
                u32,
            ),
             _| fits(*n, &[x.len(), w.len(), hidden.len()]),
        )?
    };
    // SAFETY: leaky_relu(hidden, y, n) reads hidden[i] and writes y[i] for i < n only; the
    // check keeps n within both.
    let relu = unsafe {
        KernelHandle::get(&library, "leaky_relu")?.typed::<Relu>(
            |(hidden, y, n): &(&DeviceBuffer<f32>, &DeviceBuffer<f32>, u32), _| {
                fits(*n, &[hidden.len(), y.len()])
            },
        )?
    };
    Ok((affine, relu))
}

/// The one bounds rule of both kernels: `n` elements fit in every buffer.
fn fits(n: u32, lens: &[usize]) -> handles_cuda::Result<()> {
    if lens.iter().all(|&len| n as usize <= len) {
        Ok(())
    } else {
        Err(Error::InvalidArgument("n exceeds a buffer".into()))
    }
}

fn input(batch: usize) -> Vec<f32> {
    (0..N)
        .map(|i| ((i * 31 + batch * 17) % 101) as f32 / 25.0 - 2.0)
        .collect()
}

/// The model on the host: each step one IEEE operation, as on the device (`--fmad=false`).
fn reference(x: &[f32], w: &[f32]) -> Vec<f32> {
    x.iter()
        .zip(w)
        .map(|(&x, &w)| {
            let h = x * w + BIAS;
            if h > 0.0 { h } else { 0.125 * h }
        })
        .collect()
}
