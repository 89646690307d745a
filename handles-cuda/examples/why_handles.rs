//! Why handles: five small programs, each written twice, once on cudarc's safe API (0.19.10)
//! and once on handles-cuda, and what each version does.
//!
//! 1. a kernel captured into a graph, with the defaults;
//! 2. a graph replayed after a buffer it uses is dropped;
//! 3. a launch with a wrong parameter list (the kernel's two arguments swapped);
//! 4. a launch one element past its buffer;
//! 5. an allocation on the per-thread default stream, used by a kernel on one thread and
//!    dropped on another.
//!
//! Run with `cargo run -p handles-cuda --example why_handles`. Without an NVIDIA driver it runs
//! itself on the checking simulator (`cuda-sim`, strict mode, `examples/common`). Each
//! cudarc program then runs in a child process on the simulator, not strict, so that it goes
//! to its end and the simulator's report says what it saw; they misuse memory on purpose,
//! which is why each runs in a process of its own. The handles-cuda programs run in this
//! process, on the strict
//! simulator: a violation would abort it. On a GPU the children run on the real driver, and
//! their exit status and the errors cudarc returned are what is reported.
//!
//! Every line printed is measured in the run: the errors the calls returned, the exit status,
//! the simulator's report.

use std::path::Path;
use std::process::{Command, Output};

use handles_cuda::prelude::*;

mod common;

/// Hand-written PTX, checked in: `add_one(data, n)` adds 1 to `data[i]` for `i < n`.
const PTX: &str = include_str!("../../tests/kernels/test_kernels.ptx");

/// Elements of each program's buffer.
const N: usize = 4096;
/// Threads per block of every launch.
const BLOCK: u32 = 256;

/// The five cases: the argument that selects the cudarc child, and the title.
const CASES: [(&str, &str); 5] = [
    (
        "capture",
        "capture a kernel into a graph, with the defaults",
    ),
    ("replay", "replay a graph after dropping a buffer it uses"),
    (
        "params",
        "launch add_one(data, n) with its arguments swapped: (n, data)",
    ),
    (
        "bounds",
        "launch add_one over 4097 elements of a 4096-element buffer",
    ),
    (
        "per-thread",
        "allocate and launch on the per-thread stream of one thread, drop on another",
    ),
];

fn main() {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("--cudarc") {
        let case = args.next().unwrap_or_default();
        std::process::exit(cudarc_side::run(&case));
    }
    common::driver_or_simulator("why-handles example");
    if let Err(error) = parent() {
        eprintln!("why_handles failed: {error}");
        std::process::exit(1);
    }
}

fn parent() -> handles_cuda::Result<()> {
    handles_cuda::driver::ensure_loaded()?;
    common::simulated_note();
    let simulated = common::on_the_simulator();
    if simulated {
        println!(
            "cudarc 0.19.10: each program in a child process on the simulator, not strict (it runs \
             to its end; its report is read)"
        );
        println!(
            "handles-cuda:   each program in this process, on the strict simulator (a violation \
             aborts it)"
        );
    } else {
        println!(
            "cudarc 0.19.10: each program in a child process on this GPU; handles-cuda: each \
             program in this process"
        );
    }
    let kit = Kit::new()?;
    for (number, (case, title)) in CASES.iter().enumerate() {
        println!("{}. {title}", number + 1);
        println!("   cudarc   {}", cudarc_outcome(case, simulated));
        let handles = match *case {
            "capture" => kit.capture()?,
            "replay" => kit.replay()?,
            "params" => kit.params()?,
            "bounds" => kit.bounds()?,
            "per-thread" => kit.per_thread()?,
            _ => unreachable!("every case has a handles side"),
        };
        println!("   handles  {handles}");
    }
    drop(kit);
    handles_cuda::exec::clear_primary_cache();
    println!("done");
    Ok(())
}

/// Runs the cudarc program of `case` in a child process and describes what happened: the
/// outcome of each call it reported, how it exited, and (on the simulator) the report.
fn cudarc_outcome(case: &str, simulated: bool) -> String {
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(error) => return format!("not run: cannot find this program: {error}"),
    };
    let reports = std::env::temp_dir().join(format!("why-handles-{}-{case}", std::process::id()));
    let output = if simulated {
        use cuda_sim::SimCommand;
        if let Err(error) = std::fs::create_dir_all(&reports) {
            return format!("not run: {}: {error}", reports.display());
        }
        cuda_sim::command(&program)
            .args(["--cudarc", case])
            .sim_report(reports.join("%p.json"))
            .output()
    } else {
        Command::new(&program).args(["--cudarc", case]).output()
    };
    let mut parts: Vec<String> = Vec::new();
    match output {
        Ok(output) => {
            parts.extend(
                String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .map(str::to_owned),
            );
            // A panic's message, say; the simulator's own lines are in its report.
            parts.extend(
                String::from_utf8_lossy(&output.stderr)
                    .lines()
                    .filter(|line| !line.starts_with("cuda-sim:") && !line.trim().is_empty())
                    .map(|line| format!("stderr: {line}")),
            );
            parts.push(exit_status(&output));
        }
        Err(error) => parts.push(format!("not run: {error}")),
    }
    if simulated {
        parts.push(simulator_verdict(&reports));
        let _ = std::fs::remove_dir_all(&reports);
    }
    parts.join("; ")
}

/// What the values read back show, against the value every element should hold.
fn read_back(values: &[u32], expected: u32) -> String {
    let right = values.iter().filter(|&&v| v == expected).count();
    format!(
        "read back: {right} of {} elements are {expected}",
        values.len()
    )
}

fn exit_status(output: &Output) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (output.status.code(), output.status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => {
            let name = match signal {
                libc::SIGSEGV => "SIGSEGV".to_string(),
                libc::SIGABRT => "SIGABRT".to_string(),
                libc::SIGBUS => "SIGBUS".to_string(),
                libc::SIGILL => "SIGILL".to_string(),
                libc::SIGFPE => "SIGFPE".to_string(),
                other => format!("signal {other}"),
            };
            format!("killed by {name}")
        }
        (None, None) => "no exit status".to_string(),
    }
}

/// The simulator's reports of the child (and any process it started), merged.
fn simulator_verdict(reports: &Path) -> String {
    let mut merged = cuda_sim::Report::default();
    let mut found = 0;
    for entry in std::fs::read_dir(reports).into_iter().flatten().flatten() {
        if let Ok(report) = cuda_sim::Report::read(entry.path()) {
            merged.merge(report);
            found += 1;
        }
    }
    if found == 0 {
        return "simulator: no report (the process died before writing it)".to_string();
    }
    let violations = match merged.violations.first() {
        None => "no violations".to_string(),
        Some(first) => {
            let more = match merged.violations.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            };
            format!("{} in {}{more}: {}", first.kind, first.call, first.message)
        }
    };
    let leaks = merged.leaks_without_primary();
    let leaks = if leaks.is_empty() {
        "none".to_string()
    } else {
        leaks
            .iter()
            .map(|(kind, count)| format!("{count} {kind}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("simulator: {violations}; leaks: {leaks}")
}

/// What every handles-cuda program uses: the primary context, a stream and `add_one`.
struct Kit {
    context: ContextHandle,
    stream: StreamHandle,
    kernel: KernelHandle,
    add_one: TypedKernel<(Elements<u32>, u32)>,
}

impl Kit {
    fn new() -> handles_cuda::Result<Kit> {
        let context = ContextHandle::primary(0)?;
        let stream = StreamHandle::new(&context)?;
        let library = LibraryHandle::load_ptx(PTX)?;
        let kernel = KernelHandle::get(&library, "add_one")?; // keeps the library loaded
        // SAFETY: add_one(data, n) adds 1 to data[i] for i < n only: what per_thread(1, [0])
        // covers (parameter 1 is the count, parameter 0 holds at least that many elements).
        let add_one = unsafe { kernel.checked::<(Elements<u32>, u32)>(check::per_thread(1, [0]))? };
        Ok(Kit {
            context,
            stream,
            kernel,
            add_one,
        })
    }

    fn config(elements: usize) -> handles_cuda::Result<LaunchConfig> {
        LaunchConfig::for_elements(elements, BLOCK)
    }

    /// add_one over the `N` elements of `data`, captured into a graph with the defaults, and
    /// the graph instantiated.
    fn capture_add_one(
        &self,
        data: &DeviceBuffer<u32>,
    ) -> handles_cuda::Result<(GraphHandle, GraphExecHandle)> {
        let config = Kit::config(N)?;
        let graph = GraphHandle::capture(&self.context, CaptureMode::default(), |capture| {
            capture.launch(&self.add_one, &config, (data, N as u32))
        })?;
        let exec = graph.instantiate()?;
        Ok((graph, exec))
    }

    /// Captured with the defaults, replayed 10 times, read back.
    fn capture(&self) -> handles_cuda::Result<String> {
        let data = DeviceBuffer::<u32>::zeroed(N, &self.stream)?;
        let (_graph, exec) = self.capture_add_one(&data)?;
        for _ in 0..10 {
            exec.launch(&self.stream)?;
        }
        let values = data.to_vec(&self.stream)?;
        if values.iter().any(|&v| v != 10) {
            return Err(Error::InvalidArgument(
                "the replays computed a wrong result".into(),
            ));
        }
        Ok(format!(
            "capture: Ok; 10 replays: Ok; {}",
            read_back(&values, 10)
        ))
    }

    /// The buffer dropped after the capture; the graph replayed 10 times.
    fn replay(&self) -> handles_cuda::Result<String> {
        let data = DeviceBuffer::<u32>::zeroed(N, &self.stream)?;
        let (graph, exec) = self.capture_add_one(&data)?;
        drop(graph);
        let weak = data.as_bytes().downgrade();
        drop(data);
        let kept = weak.upgrade().is_some();
        for _ in 0..10 {
            exec.launch(&self.stream)?;
        }
        self.stream.synchronize()?;
        drop(exec);
        let freed = weak.upgrade().is_none();
        Ok(format!(
            "capture: Ok; drop(data); buffer still alive: {kept}; 10 replays: Ok; after drop(exec) the \
             buffer is freed: {freed}"
        ))
    }

    /// `add_one` declared with its parameters swapped.
    fn params(&self) -> handles_cuda::Result<String> {
        // SAFETY: this declaration is the mistake under test (add_one takes (data, n)), so its
        // promise does not hold: nothing is launched through it. Where the driver reports
        // parameter sizes, `checked` refuses it.
        let declared = unsafe {
            self.kernel
                .checked::<(u32, Elements<u32>)>(check::per_thread(0, [1]))
        };
        Ok(match declared {
            Err(error) => format!("checked::<(u32, Elements<u32>)>: Err({error:?})"),
            Ok(_) => "accepted: this driver does not report parameter sizes (nothing launched)"
                .to_string(),
        })
    }

    /// One element too many.
    fn bounds(&self) -> handles_cuda::Result<String> {
        let data = DeviceBuffer::<u32>::zeroed(N, &self.stream)?;
        let config = Kit::config(N + 1)?;
        let refused = self
            .add_one
            .launch(&self.stream, &config, (&data, N as u32 + 1));
        let launch = match refused {
            Err(error) => format!("launch: Err({error:?})"),
            Ok(()) => "launch: Ok".to_string(),
        };
        let values = data.to_vec(&self.stream)?;
        Ok(format!("{launch}; {}", read_back(&values, 0)))
    }

    /// Allocated and used on the per-thread stream of a spawned thread, dropped here.
    fn per_thread(&self) -> handles_cuda::Result<String> {
        let (context, add_one) = (self.context.clone(), self.add_one.clone());
        let data = std::thread::spawn(move || {
            // Bound, as cudarc's program binds it: the context stays current until the thread
            // exits.
            context.bind_to_thread()?;
            let per_thread = StreamHandle::per_thread();
            let data = DeviceBuffer::<u32>::zeroed(N, &per_thread)?;
            add_one.launch(&per_thread, &Kit::config(N)?, (&data, N as u32))?;
            Ok::<_, Error>(data)
        })
        .join()
        .expect("the allocating thread does not panic")?;
        drop(data); // on this thread: its free is ordered after the other thread's kernel
        self.context.synchronize()?;
        Ok(
            "allocate and launch on a spawned thread's per-thread stream: Ok; dropped on the \
             main thread; synchronize: Ok"
                .into(),
        )
    }
}

/// The cudarc programs, each run as `why_handles --cudarc <case>` in a child process. Each
/// prints one line per call whose outcome matters, `call: Ok` or `call: Err(CUDA_ERROR_…)`.
mod cudarc_side {
    use std::sync::Arc;

    use cudarc::driver::{
        CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg,
        sys,
    };
    use cudarc::nvrtc::Ptx;

    use super::{BLOCK, N, PTX, read_back};

    /// Runs `case`; the exit status is 0 unless a call the program needs failed (1).
    pub fn run(case: &str) -> i32 {
        let result = match case {
            "capture" => capture(),
            "replay" => replay(),
            "params" => params(),
            "bounds" => bounds(),
            "per-thread" => per_thread(),
            other => {
                println!("unknown case {other:?}");
                return 2;
            }
        };
        match result {
            Ok(()) => 0,
            Err(_) => 1,
        }
    }

    /// Prints `call`'s outcome and passes its result on.
    fn step<T>(call: &str, result: Result<T, DriverError>) -> Result<T, DriverError> {
        match &result {
            Ok(_) => println!("{call}: Ok"),
            Err(error) => println!("{call}: Err({:?})", error.0),
        }
        result
    }

    fn config(elements: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: ((elements as u32).div_ceil(BLOCK), 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn add_one(context: &Arc<CudaContext>) -> Result<CudaFunction, DriverError> {
        context
            .load_module(Ptx::from_src(PTX))?
            .load_function("add_one")
    }

    /// What every program but `per_thread` starts from: add_one in `context`, a new stream
    /// and a zeroed buffer of `N` elements on it.
    fn add_one_on_a_stream(
        context: &Arc<CudaContext>,
    ) -> Result<(CudaFunction, Arc<CudaStream>, CudaSlice<u32>), DriverError> {
        let kernel = add_one(context)?;
        let stream = context.new_stream()?;
        let data = stream.alloc_zeros::<u32>(N)?;
        Ok((kernel, stream, data))
    }

    /// Launches add_one(data, n) on `stream`.
    fn launch(
        stream: &CudaStream,
        kernel: &CudaFunction,
        data: &mut CudaSlice<u32>,
        n: u32,
    ) -> Result<(), DriverError> {
        let mut builder = stream.launch_builder(kernel);
        builder.arg(data).arg(&n);
        // SAFETY: add_one takes (u32 *data, u32 n) and touches data[i] for i < n; every
        // caller passes an n no larger than data's length, except `bounds`, whose one element
        // too many is the mistake under test.
        unsafe { builder.launch(config(n as usize)) }.map(|_| ())
    }

    fn capture() -> Result<(), DriverError> {
        let context = CudaContext::new(0)?;
        let (kernel, stream, mut data) = add_one_on_a_stream(&context)?;
        step(
            "begin_capture",
            stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL),
        )?;
        let _ = step("launch", launch(&stream, &kernel, &mut data, N as u32));
        let graph = step(
            "end_capture",
            stream.end_capture(sys::CUgraphInstantiate_flags(0)),
        );
        if let Ok(Some(graph)) = graph {
            step("10 replays", (0..10).try_for_each(|_| graph.launch()))?;
        }
        let values = stream.clone_dtoh(&data)?;
        println!("{}", read_back(&values, 10));
        step("context.check_err", context.check_err())
    }

    fn replay() -> Result<(), DriverError> {
        let context = CudaContext::new(0)?;
        // Capture needs event tracking off: with it on, the capture fails (case 1).
        // SAFETY: its contract is about ordering work on several streams; everything here
        // runs on one stream.
        unsafe { context.disable_event_tracking() };
        let (kernel, stream, mut data) = add_one_on_a_stream(&context)?;
        stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)?;
        launch(&stream, &kernel, &mut data, N as u32)?;
        let graph = step(
            "capture",
            stream.end_capture(sys::CUgraphInstantiate_flags(0)),
        )?;
        let Some(graph) = graph else {
            println!("capture: no graph");
            return Ok(());
        };
        drop(data);
        println!("drop(data)");
        step("10 replays", (0..10).try_for_each(|_| graph.launch()))?;
        step("synchronize", stream.synchronize())
    }

    fn params() -> Result<(), DriverError> {
        let context = CudaContext::new(0)?;
        let (kernel, stream, mut data) = add_one_on_a_stream(&context)?;
        let n = N as u32;
        let mut builder = stream.launch_builder(&kernel);
        builder.arg(&n).arg(&mut data); // swapped: the mistake under test
        // SAFETY: not met, on purpose: add_one takes (u32 *data, u32 n), and (n, data) is
        // passed. This is the mistake under test; it runs in a child process.
        let launched = unsafe { builder.launch(config(N)) }.map(|_| ());
        step("launch", launched)?;
        step("synchronize", stream.synchronize())
    }

    fn bounds() -> Result<(), DriverError> {
        let context = CudaContext::new(0)?;
        let (kernel, stream, mut data) = add_one_on_a_stream(&context)?;
        step("launch", launch(&stream, &kernel, &mut data, N as u32 + 1))?;
        step("synchronize", stream.synchronize())
    }

    fn per_thread() -> Result<(), DriverError> {
        let context = CudaContext::new(0)?;
        let kernel = add_one(&context)?;
        let worker = context.clone();
        let data = std::thread::spawn(move || {
            let stream = worker.per_thread_stream();
            let mut data = stream.alloc_zeros::<u32>(N)?;
            launch(&stream, &kernel, &mut data, N as u32)?;
            Ok::<_, DriverError>(data)
        })
        .join()
        .expect("the allocating thread does not panic");
        let data = step(
            "allocate and launch on a spawned thread's per-thread stream",
            data,
        )?;
        drop(data); // on this thread: freed on this thread's per-thread stream
        println!("dropped on the main thread");
        step("synchronize", context.synchronize())
    }
}
