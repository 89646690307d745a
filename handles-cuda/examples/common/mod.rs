//! What every example of handles-cuda does first: find the driver, or, where there is none,
//! run itself again on the checking simulator (`cuda-sim`, strict mode) and end with the
//! simulator's verdict over every process it started. Where a driver exists the simulator is
//! never loaded.

use handles_cuda::Error;

/// Set in an example's own run on the simulator (and inherited by its child processes), so that
/// it never starts itself again.
const ON_THE_SIMULATOR: &str = "HANDLES_EXAMPLE_ON_THE_SIMULATOR";

/// Returns if a driver is there, or if this process already runs on the simulator. Otherwise
/// runs this program again on the simulator with the same arguments, prints the verdict, and
/// exits with the run's status (1 after a violation, a leak or a failure).
pub fn driver_or_simulator(example: &str) {
    if on_the_simulator()
        || !matches!(
            handles_cuda::driver::ensure_loaded(),
            Err(Error::DriverNotFound)
        )
    {
        return;
    }
    std::process::exit(rerun_on_the_simulator(example));
}

/// Whether this process runs on the simulator (started by [`driver_or_simulator`]).
pub fn on_the_simulator() -> bool {
    std::env::var_os(ON_THE_SIMULATOR).is_some()
}

/// The note an example prints first on the simulator, so nobody reads its times as measured.
pub fn simulated_note() {
    if on_the_simulator() {
        println!("(simulated driver: kernels run on the CPU, and times are logical, not measured)");
    }
}

fn rerun_on_the_simulator(example: &str) -> i32 {
    use cuda_sim::{Report, SimCommand};
    println!(
        "No NVIDIA driver on this machine: the {example} runs on the checking simulator \
         (cuda-sim), strict mode."
    );
    if !cuda_sim::is_built() {
        println!("The simulator is not built; `cargo build -p cuda-sim` builds it.");
        return 1;
    }
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(error) => {
            eprintln!("{example}: cannot find its own executable: {error}");
            return 1;
        }
    };
    let reports = std::env::temp_dir().join(format!("handles-example-{}", std::process::id()));
    if let Err(error) = std::fs::create_dir_all(&reports) {
        eprintln!("{example}: {}: {error}", reports.display());
        return 1;
    }
    let status = cuda_sim::command(program)
        .args(std::env::args_os().skip(1))
        .sim_strict()
        .sim_report(reports.join("%p.json"))
        .env(ON_THE_SIMULATOR, "1")
        .status();
    let mut merged = Report::default();
    for entry in std::fs::read_dir(&reports).into_iter().flatten().flatten() {
        if let Ok(report) = Report::read(entry.path()) {
            merged.merge(report);
        }
    }
    let _ = std::fs::remove_dir_all(&reports);
    let leaks = merged.leaks_without_primary();
    let leaks_line = if leaks.is_empty() {
        "none".to_string()
    } else {
        format!("{leaks:?}")
    };
    let violations = match merged.violations.len() {
        0 => "no violations".to_string(),
        n => format!("{n} violations"),
    };
    println!("simulator: {violations}; leaks: {leaks_line}");
    match status {
        Ok(status) if status.success() && merged.violations.is_empty() && leaks.is_empty() => 0,
        Ok(status) => status.code().unwrap_or(1).max(1),
        Err(error) => {
            eprintln!("{example}: cannot run on the simulator: {error}");
            1
        }
    }
}
