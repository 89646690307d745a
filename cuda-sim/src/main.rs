//! `cuda-sim run [OPTIONS] -- PROGRAM ARGS…`: runs any program, and every process it starts,
//! on the simulated driver, then prints one summary line and exits with the program's status
//! (3 when the simulator found violations).
//!
//! The simulator's `libcuda.so` is embedded in this binary and written once into a cache
//! directory, so an installed `cuda-sim` needs no build tree.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cuda_sim::{Report, SimCommand};

/// The simulator built with this binary.
static LIBRARY: &[u8] = include_bytes!(env!("CUDA_SIM_LIBRARY_FILE"));

const USAGE: &str = "usage: cuda-sim run [--strict] [--devices N] [--memory BYTES] [--report PATH] -- PROGRAM [ARGS…]
       cuda-sim nvrtc   (prints NVRTC's library directory, installing it from PyPI if needed)

Runs PROGRAM, and every process it starts, on the simulated CUDA driver, with NVRTC on the
library path when it is installed. When they end, prints
  cuda-sim: <N> violations, leaks: <by type>, <K> processes
and exits with PROGRAM's status, or 3 when there were violations.

  --strict         abort a process at its first violation (CUDA_SIM_STRICT=1)
  --devices N      simulated devices (default 1)
  --memory BYTES   memory per device (default 1 GiB)
  --report PATH    also write the merged report (JSON) to PATH";

/// What the command line asks for.
struct Options {
    strict: bool,
    devices: Option<usize>,
    memory: Option<u64>,
    report: Option<PathBuf>,
    program: OsString,
    args: Vec<OsString>,
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Options, String> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    match parser.next().map_err(|e| e.to_string())? {
        Some(Value(command)) if command == "run" => {}
        Some(Long("help") | Short('h')) | None => return Err(String::new()),
        Some(other) => return Err(format!("unknown command {}", other.unexpected())),
    }
    let mut options = Options {
        strict: false,
        devices: None,
        memory: None,
        report: None,
        program: OsString::new(),
        args: Vec::new(),
    };
    loop {
        match parser.next().map_err(|e| e.to_string())? {
            Some(Long("strict")) => options.strict = true,
            Some(Long("devices")) => {
                options.devices = Some(
                    parser
                        .value()
                        .and_then(|v| v.parse())
                        .map_err(|e| e.to_string())?,
                )
            }
            Some(Long("memory")) => {
                options.memory = Some(
                    parser
                        .value()
                        .and_then(|v| v.parse())
                        .map_err(|e| e.to_string())?,
                )
            }
            Some(Long("report")) => {
                options.report = Some(parser.value().map_err(|e| e.to_string())?.into())
            }
            Some(Long("help") | Short('h')) => return Err(String::new()),
            // Everything after `--` (or from the first plain value) is the program.
            Some(Value(program)) => {
                options.program = program;
                options.args = parser.raw_args().map_err(|e| e.to_string())?.collect();
                return Ok(options);
            }
            Some(other) => return Err(other.unexpected().to_string()),
            None => return Err("no PROGRAM to run".into()),
        }
    }
}

/// A 64-bit FNV-1a hash, naming the cache directory of one build of the library.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Writes the embedded library into `<cache>/cuda-sim/<hash>/` once, and returns that
/// directory (unless `CUDA_SIM_LIBRARY_DIR` names one already).
fn library_dir() -> std::io::Result<PathBuf> {
    if std::env::var_os("CUDA_SIM_LIBRARY_DIR").is_some_and(|dir| !dir.is_empty()) {
        return Ok(cuda_sim::library_dir());
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    let dir = cache
        .join("cuda-sim")
        .join(format!("{:016x}", fnv(LIBRARY)));
    let library = dir.join("libcuda.so");
    if !library.is_file() {
        std::fs::create_dir_all(&dir)?;
        // Write, then rename: a concurrent run never loads a half-written library.
        let temporary = dir.join(format!(".libcuda.so.{}", std::process::id()));
        std::fs::File::create(&temporary)?.write_all(LIBRARY)?;
        std::fs::rename(&temporary, &library)?;
    }
    // The simulated cuBLAS, cuRAND and CUDA runtime are the same library under their names (as `build.rs`
    // installs it).
    for name in [
        "libcuda.so.1",
        "libcublas.so",
        "libcublas.so.13",
        "libcublasLt.so",
        "libcublasLt.so.13",
        "libcurand.so",
        "libcurand.so.10",
        "libcudart.so",
        "libcudart.so.13",
    ] {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            // Another run may have made it meanwhile.
            let _ = std::os::unix::fs::symlink("libcuda.so", &link);
        }
    }
    Ok(dir)
}

/// `stream 1, event 2`, or `none`.
fn leak_list(report: &Report) -> String {
    let leaks = report.leaks_without_primary();
    if leaks.is_empty() {
        return "none".into();
    }
    leaks
        .iter()
        .map(|(kind, count)| format!("{kind} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn run(options: Options) -> Result<ExitCode, String> {
    let library = library_dir().map_err(|e| format!("cannot install the simulator: {e}"))?;
    let reports = std::env::temp_dir().join(format!(
        "cuda-sim-run-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&reports).map_err(|e| format!("{}: {e}", reports.display()))?;
    // `cuda_sim::command` puts the library path together; the directory is this run's.
    let mut command = cuda_sim::command(&options.program);
    command
        .args(&options.args)
        .env("CUDA_SIM_LIBRARY_DIR", &library)
        .env("LD_LIBRARY_PATH", cuda_sim::library_path_for(&library))
        .sim_report(reports.join("%p.json"));
    if options.strict {
        command.sim_strict();
    }
    if let Some(devices) = options.devices {
        command.sim_devices(devices);
    }
    if let Some(memory) = options.memory {
        command.sim_memory(memory);
    }
    if cuda_sim::nvrtc_dir().is_none() {
        eprintln!(
            "cuda-sim: NVRTC not found (set CUDA_SIM_NVRTC_DIR, or let `cuda-sim nvrtc` install it from PyPI); programs that compile CUDA C++ will fail"
        );
    }
    let status = command
        .status()
        .map_err(|e| format!("cannot run {}: {e}", options.program.to_string_lossy()))?;
    let mut merged = Report::default();
    let mut processes = 0;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&reports)
        .map_err(|e| e.to_string())?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in &entries {
        match Report::read(path) {
            Ok(report) => {
                processes += 1;
                merged.merge(report);
            }
            Err(error) => eprintln!("cuda-sim: {error}"),
        }
    }
    let _ = std::fs::remove_dir_all(&reports);
    if let Some(path) = &options.report {
        std::fs::write(path, merged.to_json(processes))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    eprintln!(
        "cuda-sim: {} violations, leaks: {}, {processes} processes",
        merged.violations.len(),
        leak_list(&merged)
    );
    if !merged.violations.is_empty() {
        return Ok(ExitCode::from(3));
    }
    Ok(match status.code() {
        Some(code) => ExitCode::from(code as u8),
        None => {
            use std::os::unix::process::ExitStatusExt;
            ExitCode::from(128 + status.signal().unwrap_or(0) as u8)
        }
    })
}

fn main() -> ExitCode {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|command| command == "nvrtc")
    {
        // Prints NVRTC's library directory, installing it from PyPI first if needed.
        return match cuda_sim::nvrtc_dir() {
            Some(dir) => {
                println!("{}", dir.display());
                ExitCode::SUCCESS
            }
            None => ExitCode::from(1),
        };
    }
    match parse(std::env::args_os().skip(1)) {
        Ok(options) => run(options).unwrap_or_else(|error| {
            eprintln!("cuda-sim: {error}");
            ExitCode::from(2)
        }),
        Err(error) => {
            if !error.is_empty() {
                eprintln!("cuda-sim: {error}");
            }
            eprintln!("{USAGE}");
            ExitCode::from(if error.is_empty() { 0 } else { 2 })
        }
    }
}
