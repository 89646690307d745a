//! Kernels written in CUDA C++, compiled by NVRTC to PTX at run time, launched through
//! `handles-cuda`, and checked against results computed on the host. They need a CUDA GPU and
//! are ignored by default; `on_the_simulator` runs them all again on the simulated driver,
//! whose PTX interpreter runs the same PTX on the CPU. Each family of PTX instructions that
//! NVRTC emits for ordinary kernels is used at least once. None of them returns early.

use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, KernelHandle, LaunchConfig, LibraryHandle, StreamHandle,
    code::{Buffer, ProgramHandle},
};
use handles_tests::{Failures, serial, stream};

mod simulator;

/// Compiles `source` to PTX for compute capability 9.0 and loads it.
fn compile(source: &str) -> LibraryHandle {
    let program = ProgramHandle::new(source, "kernels.cu").unwrap();
    if let Err(error) = program.compile(&["--gpu-architecture=compute_90", "-std=c++17"]) {
        panic!("{error}\n{}", program.log().unwrap_or_default());
    }
    LibraryHandle::load_data(&program.ptx().unwrap()).unwrap()
}

/// A kernel of `library` with the parameter list `P`, checked only by the driver's limits:
/// each test passes buffers large enough for its grid.
fn kernel<P: handles_cuda::code::KernelParams>(
    library: &LibraryHandle,
    name: &str,
) -> handles_cuda::code::TypedKernel<P> {
    let kernel = KernelHandle::get(library, name).unwrap();
    // SAFETY: every test sizes its buffers for the whole grid it launches (checked by the
    // test's own arithmetic next to each launch).
    unsafe { kernel.typed::<P>(|_, _| Ok(())) }.unwrap()
}

/// Device memory holding `values`.
fn upload<T: Copy>(
    context: &ContextHandle,
    stream: &StreamHandle,
    values: &[T],
) -> DevicePtrHandle {
    let bytes = std::mem::size_of_val(values);
    let buffer = DevicePtrHandle::alloc(context, bytes.max(1)).unwrap();
    // SAFETY: `T` is a plain number type in every call (no padding, no pointers).
    let raw = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), bytes) };
    buffer.copy_from_host(raw, stream).unwrap();
    buffer
}

/// Device memory for `n` values of `T`, zeroed.
fn zeroed<T>(context: &ContextHandle, stream: &StreamHandle, n: usize) -> DevicePtrHandle {
    let bytes = n * std::mem::size_of::<T>();
    let buffer = DevicePtrHandle::alloc(context, bytes).unwrap();
    buffer.memset_async(0, bytes, stream).unwrap();
    buffer
}

/// The contents of `buffer` as values of `T`.
fn download<T: Copy + Default>(buffer: &DevicePtrHandle, stream: &StreamHandle) -> Vec<T> {
    let mut values = vec![T::default(); buffer.size() / std::mem::size_of::<T>()];
    // SAFETY: `T` is a plain number type in every call: any bytes are a valid value.
    let raw = unsafe {
        std::slice::from_raw_parts_mut(
            values.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(values.as_slice()),
        )
    };
    buffer.copy_to_host(raw, stream).unwrap();
    values
}

fn setup() -> (ContextHandle, StreamHandle) {
    let context = ContextHandle::primary(0).unwrap();
    let stream = stream(&context);
    (context, stream)
}

/// `|a - b| <= tolerance * max(1, |b|)`.
fn close(a: f64, b: f64, tolerance: f64) -> bool {
    (a - b).abs() <= tolerance * b.abs().max(1.0)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn shared_memory_tree_reduction() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream) = setup();
    let library = compile(
        r#"
extern "C" __global__ void block_sums(const int *input, long long *sums, int n) {
    __shared__ long long partial[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[threadIdx.x] = i < n ? input[i] : 0;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = partial[0];
}"#,
    );
    let n: usize = 256 * 300 + 45;
    let input: Vec<i32> = (0..n as i32)
        .map(|i| i.wrapping_mul(7919) % 10007 - 5000)
        .collect();
    let blocks = n.div_ceil(256);
    let (data, sums) = (
        upload(&context, &stream, &input),
        zeroed::<i64>(&context, &stream, blocks),
    );
    kernel::<(Buffer, Buffer, i32)>(&library, "block_sums")
        .launch(
            &stream,
            &LaunchConfig::linear(n as u32, 256),
            (&data, &sums, n as i32),
        )
        .unwrap();
    let got: Vec<i64> = download(&sums, &stream);
    for (block, sum) in got.iter().enumerate() {
        let expected: i64 = input[block * 256..((block + 1) * 256).min(n)]
            .iter()
            .map(|&v| i64::from(v))
            .sum();
        assert_eq!(*sum, expected, "block {block}");
    }
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn warp_shuffle_sum_and_votes() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream) = setup();
    let library = compile(
        r#"
extern "C" __global__ void warp_sums(const float *input, float *sums, unsigned *ballots,
                                     int *votes) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = input[i];
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffff, v, offset);
    unsigned ballot = __ballot_sync(0xffffffff, input[i] > 0.5f);
    int all = __all_sync(0xffffffff, input[i] >= 0.0f);
    int any = __any_sync(0xffffffff, input[i] > 0.99f);
    float first = __shfl_sync(0xffffffff, input[i], 3);
    float up = __shfl_up_sync(0xffffffff, input[i], 1);
    float mirrored = __shfl_xor_sync(0xffffffff, input[i], 31);
    int warp = i / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        sums[warp] = v;
        ballots[warp] = ballot;
        votes[4 * warp] = all;
        votes[4 * warp + 1] = any;
        votes[4 * warp + 2] = first == input[warp * 32 + 3];
    }
    if (lane == 5) votes[4 * warp + 3] = up == input[i - 1] && mirrored == input[warp * 32 + 26];
}"#,
    );
    let n = 32 * 64;
    // Multiples of 1/64: the sums are exact in any order.
    let input: Vec<f32> = (0..n).map(|i| ((i * 37) % 64) as f32 / 64.0).collect();
    let warps = n / 32;
    let data = upload(&context, &stream, &input);
    let (sums, ballots, votes) = (
        zeroed::<f32>(&context, &stream, warps),
        zeroed::<u32>(&context, &stream, warps),
        zeroed::<i32>(&context, &stream, 4 * warps),
    );
    kernel::<(Buffer, Buffer, Buffer, Buffer)>(&library, "warp_sums")
        .launch(
            &stream,
            &LaunchConfig::linear(n as u32, 128),
            (&data, &sums, &ballots, &votes),
        )
        .unwrap();
    let (sums, ballots, votes): (Vec<f32>, Vec<u32>, Vec<i32>) = (
        download(&sums, &stream),
        download(&ballots, &stream),
        download(&votes, &stream),
    );
    for warp in 0..warps {
        let lanes = &input[warp * 32..warp * 32 + 32];
        assert_eq!(sums[warp], lanes.iter().sum::<f32>(), "warp {warp}");
        let ballot = lanes
            .iter()
            .enumerate()
            .fold(0u32, |b, (lane, &v)| b | (u32::from(v > 0.5) << lane));
        assert_eq!(ballots[warp], ballot, "warp {warp}");
        assert_eq!(votes[4 * warp], 1);
        assert_eq!(
            votes[4 * warp + 1],
            i32::from(lanes.iter().any(|&v| v > 0.99))
        );
        assert_eq!(votes[4 * warp + 2], 1);
        assert_eq!(votes[4 * warp + 3], 1);
    }
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn atomics_from_every_block() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream) = setup();
    let library = compile(
        r#"
extern "C" __global__ void histogram(const unsigned *values, int n, unsigned *bins,
                                     float *total, int *maximum, unsigned long long *sum64,
                                     int *cas_count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned v = values[i];
    atomicAdd(&bins[v % 16], 1u);
    atomicAdd(total, 1.0f);
    atomicMax(maximum, (int)v);
    atomicAdd(sum64, (unsigned long long)v);
    int old = *cas_count, assumed;
    do { assumed = old; old = atomicCAS(cas_count, assumed, assumed + 1); } while (old != assumed);
}"#,
    );
    let n = 50_000usize;
    let values: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) >> 8)
        .collect();
    let data = upload(&context, &stream, &values);
    let bins = zeroed::<u32>(&context, &stream, 16);
    let total = zeroed::<f32>(&context, &stream, 1);
    let maximum = zeroed::<i32>(&context, &stream, 1);
    let sum64 = zeroed::<u64>(&context, &stream, 1);
    let cas = zeroed::<i32>(&context, &stream, 1);
    kernel::<(Buffer, i32, Buffer, Buffer, Buffer, Buffer, Buffer)>(&library, "histogram")
        .launch(
            &stream,
            &LaunchConfig::linear(n as u32, 256),
            (&data, n as i32, &bins, &total, &maximum, &sum64, &cas),
        )
        .unwrap();
    let mut expected = [0u32; 16];
    for v in &values {
        expected[(v % 16) as usize] += 1;
    }
    assert_eq!(download::<u32>(&bins, &stream), expected);
    assert_eq!(download::<f32>(&total, &stream), [n as f32]);
    assert_eq!(
        download::<i32>(&maximum, &stream),
        [*values.iter().max().unwrap() as i32]
    );
    assert_eq!(
        download::<u64>(&sum64, &stream),
        [values.iter().map(|&v| u64::from(v)).sum::<u64>()]
    );
    assert_eq!(download::<i32>(&cas, &stream), [n as i32]);
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn float_and_double_math() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream) = setup();
    let library = compile(
        r#"
extern "C" __global__ void math(const float *x, float *out, const double *y, double *out64,
                                int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    out[8 * i + 0] = sinf(v);
    out[8 * i + 1] = expf(v * 0.25f);
    out[8 * i + 2] = sqrtf(fabsf(v));
    out[8 * i + 3] = __expf(v * 0.25f);
    out[8 * i + 4] = rsqrtf(fabsf(v) + 1.0f);
    out[8 * i + 5] = fmaf(v, 1.5f, -2.0f);
    out[8 * i + 6] = v / 3.0f;
    out[8 * i + 7] = (float)(int)(v * 10.0f) + floorf(v) + ceilf(v) + roundf(v);
    double w = y[i];
    out64[4 * i + 0] = sin(w);
    out64[4 * i + 1] = exp(w * 0.25);
    out64[4 * i + 2] = log(fabs(w) + 1.0);
    out64[4 * i + 3] = sqrt(fabs(w)) / (w + 100.0);
}"#,
    );
    let n = 4096usize;
    let x: Vec<f32> = (0..n).map(|i| (i as f32 - 2048.0) / 97.0).collect();
    let y: Vec<f64> = x.iter().map(|&v| f64::from(v) * 1.25).collect();
    let (xd, yd) = (upload(&context, &stream, &x), upload(&context, &stream, &y));
    let out = zeroed::<f32>(&context, &stream, 8 * n);
    let out64 = zeroed::<f64>(&context, &stream, 4 * n);
    kernel::<(Buffer, Buffer, Buffer, Buffer, i32)>(&library, "math")
        .launch(
            &stream,
            &LaunchConfig::linear(n as u32, 128),
            (&xd, &out, &yd, &out64, n as i32),
        )
        .unwrap();
    let (out, out64): (Vec<f32>, Vec<f64>) = (download(&out, &stream), download(&out64, &stream));
    for i in 0..n {
        let v = f64::from(x[i]);
        let got = |k: usize| f64::from(out[8 * i + k]);
        // The CUDA programming guide's bounds: sinf and expf within 2 ulp of float (about
        // 2.4e-7 relative), sqrtf exact, rsqrtf 2 ulp, __expf 2 + 1.16 * |x| ulp.
        assert!(close(got(0), v.sin(), 3e-7), "sinf({v}) = {}", got(0));
        assert!(close(got(1), (v * 0.25).exp(), 3e-7), "expf at {v}");
        assert_eq!(out[8 * i + 2], x[i].abs().sqrt(), "sqrtf at {v}");
        assert!(
            close(got(3), (v * 0.25).exp(), 2e-6),
            "__expf at {v}: {}",
            got(3)
        );
        assert!(
            close(got(4), 1.0 / (v.abs() + 1.0).sqrt(), 3e-7),
            "rsqrtf at {v}"
        );
        assert_eq!(out[8 * i + 5], x[i].mul_add(1.5, -2.0), "fmaf at {v}");
        assert_eq!(out[8 * i + 6], x[i] / 3.0, "division at {v}");
        let rounded = (x[i] * 10.0) as i32 as f32 + x[i].floor() + x[i].ceil() + x[i].round();
        assert_eq!(out[8 * i + 7], rounded, "conversions at {v}");
        let w = y[i];
        // Double precision: within 2 ulp (4.5e-16 relative); allow 1e-15.
        assert!(close(out64[4 * i], w.sin(), 1e-15), "sin({w})");
        assert!(
            close(out64[4 * i + 1], (w * 0.25).exp(), 1e-15),
            "exp at {w}"
        );
        assert!(
            close(out64[4 * i + 2], (w.abs() + 1.0).ln(), 1e-15),
            "log at {w}"
        );
        assert!(
            close(out64[4 * i + 3], w.abs().sqrt() / (w + 100.0), 1e-15),
            "sqrt at {w}"
        );
    }
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sixty_four_bit_indices_and_integer_operations() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream) = setup();
    let library = compile(
        r#"
extern "C" __global__ void wide(unsigned long long *out, unsigned *bits, size_t n,
                                long long scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long v = (long long)(i * 0x100000001ull) * scale;
    out[3 * i] = (unsigned long long)(v / 7 + v % 1000003);
    out[3 * i + 1] = ((unsigned long long)i << 40) ^ ((unsigned long long)v >> 3);
    out[3 * i + 2] = __umul64hi(i + 12345, 0x9e3779b97f4a7c15ull) + __brevll(i);
    unsigned u = (unsigned)i * 2654435761u;
    bits[4 * i] = __popc(u);
    bits[4 * i + 1] = __clz(u | 1);
    bits[4 * i + 2] = __brev(u);
    bits[4 * i + 3] = (u / 13u) + (u % 13u) + min(u, 1000u) + max((int)u, -5) + (unsigned)abs((int)u);
}"#,
    );
    let n = 10_000usize;
    let scale = -3i64;
    let out = zeroed::<u64>(&context, &stream, 3 * n);
    let bits = zeroed::<u32>(&context, &stream, 4 * n);
    kernel::<(Buffer, Buffer, u64, i64)>(&library, "wide")
        .launch(
            &stream,
            &LaunchConfig::linear(n as u32, 256),
            (&out, &bits, n as u64, scale),
        )
        .unwrap();
    let (out, bits): (Vec<u64>, Vec<u32>) = (download(&out, &stream), download(&bits, &stream));
    for i in 0..n {
        let i64_ = i as u64;
        let v = (i64_.wrapping_mul(0x1_0000_0001) as i64).wrapping_mul(scale);
        assert_eq!(
            out[3 * i],
            (v / 7 + v % 1_000_003) as u64,
            "division at {i}"
        );
        assert_eq!(
            out[3 * i + 1],
            (i64_ << 40) ^ ((v as u64) >> 3),
            "shifts at {i}"
        );
        let high = ((u128::from(i64_ + 12345) * 0x9e37_79b9_7f4a_7c15u128) >> 64) as u64;
        assert_eq!(
            out[3 * i + 2],
            high.wrapping_add(i64_.reverse_bits()),
            "mulhi at {i}"
        );
        let u = (i as u32).wrapping_mul(2_654_435_761);
        assert_eq!(bits[4 * i], u.count_ones());
        assert_eq!(bits[4 * i + 1], (u | 1).leading_zeros());
        assert_eq!(bits[4 * i + 2], u.reverse_bits());
        let mixed = (u / 13)
            .wrapping_add(u % 13)
            .wrapping_add(u.min(1000))
            .wrapping_add((u as i32).max(-5) as u32)
            .wrapping_add((u as i32).wrapping_abs() as u32);
        assert_eq!(bits[4 * i + 3], mixed, "integer mix at {i}");
    }
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn constant_memory_local_arrays_and_device_functions() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream) = setup();
    let library = compile(
        r#"
__constant__ float coefficients[6] = {1.0f, -0.5f, 0.25f, -0.125f, 0.0625f, -0.03125f};

__device__ __noinline__ float horner(float x) {
    float acc = 0.0f;
    for (int k = 5; k >= 0; --k) acc = acc * x + coefficients[k];
    return acc;
}

extern "C" __global__ void evaluate(const float *x, float *out, const int *order, int *picked,
                                    int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = horner(x[i]);
    // A local array indexed by data: it lives in the thread's local memory.
    volatile int scratch[16];
    for (int k = 0; k < 16; ++k) scratch[k] = k * k + i;
    picked[i] = scratch[order[i] & 15];
}"#,
    );
    let n = 3000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32 / 1500.0 - 1.0).collect();
    let order: Vec<i32> = (0..n as i32).map(|i| i * 7 + 3).collect();
    let (xd, od) = (
        upload(&context, &stream, &x),
        upload(&context, &stream, &order),
    );
    let (out, picked) = (
        zeroed::<f32>(&context, &stream, n),
        zeroed::<i32>(&context, &stream, n),
    );
    kernel::<(Buffer, Buffer, Buffer, Buffer, i32)>(&library, "evaluate")
        .launch(
            &stream,
            &LaunchConfig::linear(n as u32, 64),
            (&xd, &out, &od, &picked, n as i32),
        )
        .unwrap();
    let (out, picked): (Vec<f32>, Vec<i32>) = (download(&out, &stream), download(&picked, &stream));
    let c = [1.0f32, -0.5, 0.25, -0.125, 0.0625, -0.03125];
    for i in 0..n {
        let mut acc = 0.0f32;
        for k in (0..6).rev() {
            // NVRTC contracts `acc * x + c` into one fma.
            acc = acc.mul_add(x[i], c[k]);
        }
        assert_eq!(out[i], acc, "horner at {}", x[i]);
        let k = order[i] & 15;
        assert_eq!(picked[i], k * k + i as i32);
    }
    failures.assert_none();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn two_dimensional_grid_and_dynamic_shared_memory() {
    let _serial = serial();
    let failures = Failures::watch();
    let (context, stream) = setup();
    let library = compile(
        r#"
extern "C" __global__ void transpose(const float *in, float *out, int width, int height) {
    extern __shared__ float tile[];
    int x = blockIdx.x * 16 + threadIdx.x, y = blockIdx.y * 16 + threadIdx.y;
    if (x < width && y < height) tile[threadIdx.y * 17 + threadIdx.x] = in[y * width + x];
    __syncthreads();
    int tx = blockIdx.y * 16 + threadIdx.x, ty = blockIdx.x * 16 + threadIdx.y;
    if (tx < height && ty < width) out[ty * height + tx] = tile[threadIdx.x * 17 + threadIdx.y];
}"#,
    );
    let (width, height) = (100usize, 70usize);
    let input: Vec<f32> = (0..width * height).map(|i| i as f32).collect();
    let data = upload(&context, &stream, &input);
    let out = zeroed::<f32>(&context, &stream, width * height);
    let config = LaunchConfig {
        grid: [width.div_ceil(16) as u32, height.div_ceil(16) as u32, 1],
        block: [16, 16, 1],
        shared_mem_bytes: 16 * 17 * 4,
    };
    kernel::<(Buffer, Buffer, i32, i32)>(&library, "transpose")
        .launch(&stream, &config, (&data, &out, width as i32, height as i32))
        .unwrap();
    let out: Vec<f32> = download(&out, &stream);
    for y in 0..height {
        for x in 0..width {
            assert_eq!(out[x * height + y], input[y * width + x], "({x}, {y})");
        }
    }
    failures.assert_none();
}

/// The child of [`device_printf_reaches_stdout`]: a kernel that prints, then a synchronize.
fn print_in_child() {
    let (_context, stream) = setup();
    let library = compile(
        r#"
extern "C" __global__ void hello(int base, double scale) {
    if (threadIdx.x < 2)
        printf("block %d thread %u: %d %5.2f %x %s\n", blockIdx.x, threadIdx.x,
               base + (int)threadIdx.x, scale * threadIdx.x, 255u + blockIdx.x, "ok");
}"#,
    );
    kernel::<(i32, f64)>(&library, "hello")
        .launch(
            &stream,
            &LaunchConfig {
                grid: [1, 1, 1],
                block: [32, 1, 1],
                shared_mem_bytes: 0,
            },
            (40, 1.5),
        )
        .unwrap();
    stream.synchronize().unwrap();
    println!("child: synchronized");
}

/// Device-side `printf` reaches the process's stdout when the host synchronises.
#[test]
#[ignore = "needs a CUDA GPU"]
fn device_printf_reaches_stdout() {
    let _serial = serial();
    if handles_tests::child::role().as_deref() == Some("printer") {
        return print_in_child();
    }
    let output = handles_tests::child::run("device_printf_reaches_stdout", "printer", &[]);
    handles_tests::child::assert_success(&output);
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The test harness's own `test … ` prefix may share the first line.
    let mut lines: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.find("block ").map(|at| &line[at..]))
        .collect();
    // The order of lines from different threads is not specified.
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "block 0 thread 0: 40  0.00 ff ok",
            "block 0 thread 1: 41  1.50 ff ok"
        ],
        "{stdout}"
    );
    let printed = stdout.find("block 0 thread 0").unwrap();
    assert!(
        printed < stdout.find("child: synchronized").unwrap(),
        "printed by the synchronize: {stdout}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn compile_errors_carry_the_log() {
    let _serial = serial();
    let broken = ProgramHandle::new("__global__ void f() { undeclared(); }", "broken.cu").unwrap();
    match broken.compile(&["--gpu-architecture=compute_90"]) {
        Err(Error::Nvrtc { log, .. }) => assert!(log.contains("undeclared"), "{log}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
}

/// Typed memory: `n` floats allocated, a `Vec<f32>` copied in, a kernel with typed buffer
/// parameters whose bounds check counts elements, and a `Vec<f32>` read back; no byte
/// arithmetic and no `unsafe` but `typed`. Out-of-range element ranges are errors.
#[test]
#[ignore = "needs a CUDA GPU"]
fn typed_buffers_count_elements() {
    use handles_cuda::{DeviceBuffer, code::Elements};
    let _serial = serial();
    let failures = Failures::watch();
    let (_context, stream) = setup();
    let library = compile(
        r#"
extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"#,
    );
    let kernel = KernelHandle::get(&library, "saxpy").unwrap();
    // SAFETY: `saxpy(a, x, y, n)` reads `n` floats of `x` and writes `n` of `y`; the check
    // makes sure both hold `n`.
    let saxpy = unsafe {
        kernel.typed::<(f32, Elements<f32>, Elements<f32>, u32)>(
            |args: &(f32, &DeviceBuffer<f32>, &DeviceBuffer<f32>, u32), _| {
                let n = args.3 as usize;
                if n <= args.1.len() && n <= args.2.len() {
                    Ok(())
                } else {
                    Err(Error::InvalidArgument(format!("{n} elements do not fit")))
                }
            },
        )
    }
    .unwrap();
    let n = 10_000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| (n - i) as f32 * 0.5).collect();
    let xd = DeviceBuffer::from_slice(&x, &stream).unwrap();
    let yd = DeviceBuffer::<f32>::alloc_async(n, &stream).unwrap();
    yd.copy_from(&y, &stream).unwrap();
    saxpy
        .launch(
            &stream,
            &LaunchConfig::linear(n as u32, 256),
            (2.0, &xd, &yd, n as u32),
        )
        .unwrap();
    let out = yd.to_vec(&stream).unwrap();
    for i in 0..n {
        assert_eq!(out[i], 2.0f32.mul_add(x[i], y[i]), "element {i}");
    }
    // A view of elements 100..200 passed on its own: the kernel sees 100 elements.
    let head = xd.slice(100..200).unwrap();
    assert_eq!(head.len(), 100);
    assert_eq!(head.to_vec(&stream).unwrap(), x[100..200]);
    let bigger = saxpy.launch(
        &stream,
        &LaunchConfig::linear(200, 256),
        (1.0, &head, &yd, 200),
    );
    assert!(bigger.is_err(), "200 elements of a 100-element view");
    // Element ranges outside the buffer are errors, and nothing is copied.
    assert!(matches!(
        xd.slice(n - 1..n + 1),
        Err(Error::ElementsOutOfRange { start, count: 2, len }) if start == n - 1 && len == n
    ));
    assert!(matches!(
        xd.slice(std::ops::Range { start: 5, end: 3 }),
        Err(Error::ReversedRange { start: 5, end: 3 })
    ));
    assert!(matches!(
        xd.copy_from_at(usize::MAX, &[1.0, 2.0], &stream),
        Err(Error::ElementsOutOfRange {
            start: usize::MAX,
            count: 2,
            ..
        })
    ));
    let mut two = [0f32; 2];
    assert!(matches!(
        xd.copy_to_at(n - 1, &mut two, &stream),
        Err(Error::ElementsOutOfRange { count: 2, .. })
    ));
    // Three f32 are not a whole number of f64; one f32 in, two are, but misaligned for f64. A
    // refused `from_bytes` leaves the caller's handle as it was.
    let three = xd.slice(0..3).unwrap().into_bytes();
    assert!(matches!(
        DeviceBuffer::<f64>::from_bytes(&three),
        Err(Error::NotWholeElements {
            size: 12,
            element_size: 8,
            ..
        })
    ));
    let odd = xd.slice(1..3).unwrap().into_bytes();
    assert!(matches!(
        DeviceBuffer::<f64>::from_bytes(&odd),
        Err(Error::MisalignedElements { align: 8, .. })
    ));
    assert_eq!(odd.size(), 8, "the refused handle is still the caller's");
    assert_eq!(
        DeviceBuffer::<f32>::from_bytes(&odd)
            .unwrap()
            .to_vec(&stream)
            .unwrap(),
        x[1..3]
    );
    assert!(matches!(
        DeviceBuffer::<()>::alloc_async(4, &stream),
        Err(Error::ZeroSizedElement { .. })
    ));
    let zeros = DeviceBuffer::<u64>::zeroed(7, &stream).unwrap();
    assert_eq!(zeros.to_vec(&stream).unwrap(), [0u64; 7]);
    let copy = DeviceBuffer::<f32>::alloc_async(n, &stream).unwrap();
    xd.copy_to_device(&copy, &stream).unwrap();
    assert_eq!(copy.to_vec(&stream).unwrap(), x);
    failures.assert_none();
}

/// A first program as the README writes it (its first kernel example, saxpy, then a block
/// reduction): one import, one call to compile and load, kernels declared with ready-made
/// checks and no closure, a block reduction over dynamic shared
/// memory checked against the host, and each refusal a variant naming kernel and parameter.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_first_program_needs_no_hand_written_check() {
    use handles_cuda::prelude::*;
    let _serial = serial();
    let failures = Failures::watch();
    let context = ContextHandle::primary(0).unwrap();
    let stream = StreamHandle::new(&context).unwrap();
    let device = Device::new(0).unwrap();
    let (major, minor) = device.compute_capability().unwrap();
    let option = ProgramHandle::gpu_architecture(&device).unwrap();
    assert_eq!(
        option,
        format!("--gpu-architecture=compute_{major}{minor}"),
        "NVRTC compiles for every architecture of the simulated and the test GPUs"
    );
    let library = LibraryHandle::from_cuda_source(
        r#"
extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void block_sum(const float *in, float *out, unsigned n) {
    extern __shared__ float partial[];
    unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    partial[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) partial[t] += partial[t + s];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = partial[0];
}

extern "C" __global__ void fill_signed(int *xs, int n, int value) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) xs[i] = value;
}"#,
        &device,
    )
    .unwrap();
    // SAFETY: saxpy(a, x, y, n) touches x[i] and y[i] for i < n only.
    let saxpy = unsafe {
        KernelHandle::get(&library, "saxpy")
            .unwrap()
            .checked::<(f32, Elements<f32>, Elements<f32>, u32)>(check::per_thread(3, [1, 2]))
    }
    .unwrap();
    // SAFETY: block_sum reads in[i] for i < n only, writes out[b] for its own block b only,
    // and uses one float of dynamic shared memory per thread of its block.
    let block_sum = unsafe {
        KernelHandle::get(&library, "block_sum")
            .unwrap()
            .checked::<(Elements<f32>, Elements<f32>, u32)>(
                check::per_thread(2, [0])
                    .and(check::per_block([1]))
                    .and(check::shared_per_thread(4)),
            )
    }
    .unwrap();
    // SAFETY: fill_signed(xs, n, value) writes xs[i] for 0 <= i < n only.
    let fill_signed = unsafe {
        KernelHandle::get(&library, "fill_signed")
            .unwrap()
            .checked::<(Elements<i32>, i32, i32)>(check::per_thread(1, [0]))
    }
    .unwrap();

    let n = 10_000usize;
    let x: Vec<f32> = (0..n).map(|i| (i % 17) as f32).collect();
    let xd = DeviceBuffer::from_slice(&x, &stream).unwrap();
    let yd = DeviceBuffer::from_slice(&vec![1.0f32; n], &stream).unwrap();
    let config = LaunchConfig::for_elements(n, 256).unwrap();
    saxpy
        .launch(&stream, &config, (2.0, &xd, &yd, n as u32))
        .unwrap();
    let y = yd.to_vec(&stream).unwrap();
    assert!(y.iter().zip(&x).all(|(&y, &x)| y == 2.0 * x + 1.0));
    // As in the README's first kernel example: one element too many is refused at the first
    // buffer that is too short, x (parameter 1).
    assert_eq!(
        saxpy
            .launch(&stream, &config, (2.0, &xd, &yd, n as u32 + 1))
            .unwrap_err(),
        Error::OutOfBounds {
            kernel: "saxpy".into(),
            param: 1,
            needed: n as u64 + 1,
            len: n
        }
    );
    let short = DeviceBuffer::<f32>::zeroed(n - 1, &stream).unwrap();
    assert_eq!(
        saxpy
            .launch(&stream, &config, (2.0, &xd, &short, n as u32))
            .unwrap_err(),
        Error::OutOfBounds {
            kernel: "saxpy".into(),
            param: 2,
            needed: n as u64,
            len: n - 1
        }
    );

    let blocks = n.div_ceil(256);
    let sums = DeviceBuffer::<f32>::zeroed(blocks, &stream).unwrap();
    let reduce = config.with_shared_mem(256 * 4);
    block_sum
        .launch(&stream, &reduce, (&yd, &sums, n as u32))
        .unwrap();
    let got = sums.to_vec(&stream).unwrap();
    for (block, sum) in got.iter().enumerate() {
        let expected: f32 = y[block * 256..((block + 1) * 256).min(n)].iter().sum();
        assert_eq!(*sum, expected, "block {block}");
    }
    match block_sum.launch(&stream, &config, (&yd, &sums, n as u32)) {
        Err(Error::SharedOutOfBounds {
            kernel,
            needed: 1024,
            bytes: 0,
        }) => assert_eq!(kernel, "block_sum"),
        other => panic!("expected SharedOutOfBounds, got {other:?}"),
    }
    let few = DeviceBuffer::<f32>::zeroed(blocks - 1, &stream).unwrap();
    match block_sum.launch(&stream, &reduce, (&yd, &few, n as u32)) {
        Err(Error::OutOfBounds {
            param: 1,
            needed,
            len,
            ..
        }) => assert_eq!((needed, len), (blocks as u64, blocks - 1)),
        other => panic!("expected OutOfBounds, got {other:?}"),
    }

    // A negative count is refused: C compares it with an unsigned index as a huge number.
    let xs = DeviceBuffer::<i32>::zeroed(64, &stream).unwrap();
    let small = LaunchConfig::for_elements(64, 64).unwrap();
    fill_signed.launch(&stream, &small, (&xs, 64, -7)).unwrap();
    assert_eq!(xs.to_vec(&stream).unwrap(), vec![-7; 64]);
    match fill_signed.launch(&stream, &small, (&xs, -1, 5)) {
        Err(Error::OutOfBounds {
            needed, len: 64, ..
        }) => assert_eq!(needed, u64::from(u32::MAX)),
        other => panic!("expected OutOfBounds, got {other:?}"),
    }

    // A kernel declared without `extern "C"` has a mangled name, which the error lists.
    let mangled = LibraryHandle::from_cuda_source(
        "__global__ void scale(float *xs, unsigned n) { if (threadIdx.x < n) xs[threadIdx.x] *= 2; }",
        &device,
    )
    .unwrap();
    match KernelHandle::get(&mangled, "scale") {
        Err(Error::KernelNotFound { name, known }) => {
            assert_eq!(name, "scale");
            assert_eq!(known, ["_Z5scalePfj"]);
        }
        other => panic!("expected KernelNotFound, got {other:?}"),
    }
    failures.assert_none();
}

/// `compile(&[])` needs no architecture: NVRTC's default (the oldest it supports) runs on any
/// newer device; `compile_for` picks the device's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn compile_without_an_architecture_and_for_the_device() {
    use handles_cuda::exec::Device;
    let _serial = serial();
    let failures = Failures::watch();
    let (_context, stream) = setup();
    let device = Device::new(0).unwrap();
    let source = r#"extern "C" __global__ void seven(unsigned *out) { out[threadIdx.x] = 7; }"#;
    let target = |program: &ProgramHandle| -> String {
        let ptx = String::from_utf8(program.ptx().unwrap()).unwrap();
        let line = ptx
            .lines()
            .find(|line| line.starts_with(".target"))
            .unwrap();
        line.to_owned()
    };
    let plain = ProgramHandle::new(source, "plain.cu").unwrap();
    plain.compile(&[]).unwrap();
    let default = target(&plain);
    let for_device = ProgramHandle::new(source, "device.cu").unwrap();
    for_device.compile_for(&device).unwrap();
    assert_eq!(
        target(&for_device),
        format!(".target sm_{}", device.arch().unwrap())
    );
    assert_ne!(default, target(&for_device), "{default}");
    for program in [plain, for_device] {
        let library = LibraryHandle::load_data(&program.ptx().unwrap()).unwrap();
        let out = zeroed::<u32>(&_context, &stream, 32);
        kernel::<(Buffer,)>(&library, "seven")
            .launch(&stream, &LaunchConfig::linear(32, 32), (&out,))
            .unwrap();
        assert_eq!(download::<u32>(&out, &stream), vec![7; 32]);
    }
    failures.assert_none();
}

const NOT_SIMULATED: &[(&str, &str)] = &[];

#[test]
fn on_the_simulator() {
    simulator::SuiteRun {
        label: "gpu_nvrtc",
        filters: &[],
        skips: &[],
        not_simulated: NOT_SIMULATED,
        devices: 1,
        env: &[],
    }
    .run();
}
