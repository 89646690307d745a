//! A loop of `ITERATIONS` one-thread kernels: on the device, as a graph whose while node runs
//! the kernel until the kernel ends the loop, against the same loop driven from the host (one
//! kernel launch, or one launch of a one-kernel graph, per iteration). Each operation is the
//! whole loop and a stream synchronisation, so the table compares the time to finish it.

use handles_bench::{Measured, Variant, interleave, keep};
use handles_cuda::code::{Buffer, Conditional, ConditionalHandle, TypedKernel};
use handles_cuda::graph::{ConditionalKind, GraphHandle};
use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, KernelHandle, LaunchConfig, LibraryHandle, StreamHandle,
};

use super::{ROUNDS, ok, sys};

/// Kernels run per loop.
const ITERATIONS: u32 = 100;
/// Loops per timed batch.
const LOOPS: usize = 5;

/// `count_to(handle, counter, k)`: adds one to `counter[0]` and, at `k`, sets the condition
/// to 0; `step(counter)` adds one. NVRTC's PTX for the two, at an ISA version that CUDA 12.3
/// and newer drivers load (`cudaGraphSetConditional` is resolved by the driver at load).
const PTX: &str = r#"
.version 8.0
.target sm_90
.address_size 64

.extern .func cudaGraphSetConditional
(
	.param .b64 cudaGraphSetConditional_param_0,
	.param .b32 cudaGraphSetConditional_param_1
)
;

.visible .entry count_to(
	.param .u64 count_to_param_0,
	.param .u64 count_to_param_1,
	.param .u32 count_to_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<4>;

	ld.param.u64 	%rd1, [count_to_param_0];
	ld.param.u64 	%rd2, [count_to_param_1];
	ld.param.u32 	%r1, [count_to_param_2];
	cvta.to.global.u64 	%rd3, %rd2;
	ld.global.u32 	%r2, [%rd3];
	add.s32 	%r3, %r2, 1;
	st.global.u32 	[%rd3], %r3;
	setp.lt.u32 	%p1, %r3, %r1;
	@%p1 bra 	$L__BB0_2;
	{
	.param .b64 param0;
	st.param.b64 	[param0+0], %rd1;
	.param .b32 param1;
	st.param.b32 	[param1+0], 0;
	call.uni cudaGraphSetConditional, (param0, param1);
	}
$L__BB0_2:
	ret;
}

.visible .entry step(
	.param .u64 step_param_0
)
{
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<3>;

	ld.param.u64 	%rd1, [step_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	ld.global.u32 	%r1, [%rd2];
	add.s32 	%r2, %r1, 1;
	st.global.u32 	[%rd2], %r2;
	ret;
}
"#;

fn word(buffer: &DevicePtrHandle) -> handles_cuda::Result<()> {
    if buffer.size() >= 4 {
        Ok(())
    } else {
        Err(Error::InvalidArgument("a kernel needs one word".into()))
    }
}

/// The three loops, each a `Variant` that runs `ITERATIONS` kernels and waits for them.
pub fn conditional_loops(context: &ContextHandle, stream: &StreamHandle) -> Measured {
    let library = LibraryHandle::load_ptx(PTX).unwrap();
    // SAFETY: `(Conditional, Buffer, u32)` is count_to's parameter list; it touches
    // `counter[0]` only, which the check requires.
    let count_to: TypedKernel<(Conditional, Buffer, u32)> = unsafe {
        KernelHandle::get(&library, "count_to")
            .unwrap()
            .typed(|(_, c, _): &(&ConditionalHandle, &DevicePtrHandle, u32), _| word(c))
            .unwrap()
    };
    // SAFETY: `(Buffer,)` is step's parameter list; it touches `counter[0]` only, which the
    // check requires.
    let step: TypedKernel<(Buffer,)> = unsafe {
        KernelHandle::get(&library, "step")
            .unwrap()
            .typed(|(c,): &(&DevicePtrHandle,), _| word(c))
            .unwrap()
    };
    let counter = DevicePtrHandle::alloc(context, 4).unwrap();
    let one = LaunchConfig::linear(1, 1);
    // The device loop: reset the counter, then a while node whose body counts to ITERATIONS.
    let looped = GraphHandle::create(context).unwrap();
    let handle = looped.create_conditional(Some(1)).unwrap();
    let reset = looped.add_memset_node(&[], &counter, 0, 0, 4).unwrap();
    let node = looped
        .add_conditional_node(&[reset], &handle, ConditionalKind::While)
        .unwrap();
    node.bodies[0]
        .add_kernel_node(&[], &count_to, &one, (&handle, &counter, ITERATIONS))
        .unwrap();
    let looped = looped.instantiate().unwrap();
    // The host loop over a one-kernel graph.
    let single = GraphHandle::create(context).unwrap();
    single
        .add_kernel_node(&[], &step, &one, (&counter,))
        .unwrap();
    let single = single.instantiate().unwrap();
    let (raw_looped, raw_single, raw_stream) = (looped.as_cu(), single.as_cu(), stream.as_cu());
    let raw_step = step.kernel().as_cu() as sys::CUfunction;
    let raw_counter = counter.as_cu();
    let sync = || {
        // SAFETY: the stream is alive.
        unsafe { ok(sys::cuStreamSynchronize(raw_stream)) }
    };
    let measured = interleave(
        &mut [
            Variant::new("raw cuLaunchKernel x100 from the host", || {
                let mut pointer = raw_counter;
                let mut params = [(&raw mut pointer).cast::<std::ffi::c_void>()];
                for _ in 0..ITERATIONS {
                    // SAFETY: `step` takes one pointer, to a live word; the primary context is
                    // current (gpu_bench's main).
                    unsafe {
                        ok(sys::cuLaunchKernel(
                            raw_step,
                            1,
                            1,
                            1,
                            1,
                            1,
                            1,
                            0,
                            raw_stream,
                            params.as_mut_ptr(),
                            std::ptr::null_mut(),
                        ))
                    };
                }
                sync();
            }),
            Variant::new("raw cuGraphLaunch of a 1-kernel graph x100", || {
                for _ in 0..ITERATIONS {
                    // SAFETY: the executable graph and the stream are alive.
                    unsafe { ok(sys::cuGraphLaunch(keep(raw_single), raw_stream)) };
                }
                sync();
            }),
            Variant::new(
                "raw cuGraphLaunch of the while-node graph (100 iterations)",
                || {
                    // SAFETY: the executable graph and the stream are alive.
                    unsafe { ok(sys::cuGraphLaunch(keep(raw_looped), raw_stream)) };
                    sync();
                },
            ),
            Variant::new("handles-cuda TypedKernel::launch x100", || {
                for _ in 0..ITERATIONS {
                    keep(&step).launch(stream, &one, (&counter,)).unwrap();
                }
                stream.synchronize().unwrap();
            }),
            Variant::new(
                "handles-cuda GraphExecHandle::launch x100 (1-kernel graph)",
                || {
                    for _ in 0..ITERATIONS {
                        keep(&single).launch(stream).unwrap();
                    }
                    stream.synchronize().unwrap();
                },
            ),
            Variant::new(
                "handles-cuda GraphExecHandle::launch (while node, 100 iterations)",
                || {
                    keep(&looped).launch(stream).unwrap();
                    stream.synchronize().unwrap();
                },
            ),
        ],
        ROUNDS,
        LOOPS,
        || stream.synchronize().unwrap(),
    );
    // The device loop really ran ITERATIONS kernels.
    looped.launch(stream).unwrap();
    let mut bytes = [0u8; 4];
    counter.copy_to_host(&mut bytes, stream).unwrap();
    assert_eq!(u32::from_ne_bytes(bytes), ITERATIONS);
    measured
}
