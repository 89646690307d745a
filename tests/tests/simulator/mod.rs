//! Running this test binary again, as a child process, on the simulated CUDA driver of
//! `cuda-sim` (`cuda_sim::command` puts its `libcuda.so` first on `LD_LIBRARY_PATH`), and
//! checking what the child did and what the simulator reported.
//!
//! Shared by the test files that `mod simulator;` it: `gpu.rs`, `gpu_process.rs`, `soak.rs`
//! (their `on_the_simulator` launchers) and `fault_sweep.rs`. Not every user calls every item.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use cuda_sim::{Report, SimCommand};

/// The name of the launcher test in each GPU test file; its child runs skip it.
pub const LAUNCHER: &str = "on_the_simulator";

/// Writes a line to the process's real standard output. libtest captures only the `print!`
/// family, so these lines show in `cargo test` output even for a passing test.
pub fn say(line: impl Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A fresh, empty directory under the system's temporary directory, unique to this process and
/// call; removed again by [`Scratch::drop`].
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// Creates `<tmp>/handles-sim-<label>-<pid>-<n>`.
    pub fn new(label: &str) -> Scratch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "handles-sim-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        Scratch(dir)
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A command that re-runs this test binary on the simulator (no `CUDA_SIM_*` setting
/// inherited).
pub fn this_binary() -> Command {
    cuda_sim::command(std::env::current_exe().expect("the test binary's path"))
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    let mut out = String::new();
    if start > 0 {
        out.push_str(&format!("[... {start} earlier lines]\n"));
    }
    for line in &all[start..] {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Violations summarised as `kind ×count`, then the first few messages.
pub fn describe_violations(report: &Report, first: usize) -> String {
    if report.violations.is_empty() {
        return "no violations".into();
    }
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for violation in &report.violations {
        *kinds.entry(violation.kind.as_str()).or_default() += 1;
    }
    let mut text = format!(
        "{} violation(s): {}",
        report.violations.len(),
        kinds
            .iter()
            .map(|(kind, n)| format!("{kind} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for violation in report.violations.iter().take(first) {
        text.push_str(&format!(
            "\n      {}: {} (in {})",
            violation.kind, violation.message, violation.call
        ));
    }
    if first > 0 && report.violations.len() > first {
        text.push_str(&format!(
            "\n      ... and {} more",
            report.violations.len() - first
        ));
    }
    text
}

/// Leaks as `type: count, ...`, or `none`.
pub fn describe_leaks(leaks: &BTreeMap<String, u64>) -> String {
    if leaks.is_empty() {
        return "none".into();
    }
    leaks
        .iter()
        .map(|(kind, n)| format!("{kind}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One child run of a GPU test file on the simulator.
pub struct SuiteRun<'a> {
    /// A label for the printed lines (`gpu`, `gpu, 2 devices`, ...).
    pub label: &'a str,
    /// Test-name filters (positional libtest arguments); empty runs every test.
    pub filters: &'a [&'a str],
    /// Tests skipped in this run because another run covers them (`--skip`).
    pub skips: &'a [&'a str],
    /// Tests that cannot run on the simulator, with the reason: skipped and printed.
    pub not_simulated: &'a [(&'a str, &'a str)],
    /// `CUDA_SIM_DEVICES`.
    pub devices: usize,
    /// Extra environment for the child.
    pub env: &'a [(&'a str, &'a str)],
}

/// libtest's figures from its `test result:` line.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Tests that passed.
    pub passed: usize,
    /// Tests that failed.
    pub failed: usize,
}

fn tally(stdout: &str) -> Option<Tally> {
    let line = stdout
        .lines()
        .rev()
        .find(|line| line.starts_with("test result:"))?;
    let figure = |word: &str| -> Option<usize> {
        let end = line.find(&format!(" {word}"))?;
        let start = line[..end].rfind(' ').map_or(0, |i| i + 1);
        line[start..end].parse().ok()
    };
    Some(Tally {
        passed: figure("passed")?,
        failed: figure("failed")?,
    })
}

/// Runs the tests of this binary whose names contain `filter` in one child on one simulated
/// device (a reproducer file runs each group in a child of its own), with `not_simulated` the
/// file's list of tests the simulator cannot model.
pub fn run_group(label: &str, filter: &str, not_simulated: &[(&str, &str)]) {
    SuiteRun {
        label,
        filters: &[filter],
        skips: &[],
        not_simulated,
        devices: 1,
        env: &[],
    }
    .run();
}

impl SuiteRun<'_> {
    fn selection(&self) -> Vec<String> {
        let mut args: Vec<String> = self.filters.iter().map(|f| f.to_string()).collect();
        args.extend(["--skip".into(), LAUNCHER.into()]);
        for skip in self
            .skips
            .iter()
            .chain(self.not_simulated.iter().map(|(name, _)| name))
        {
            args.extend(["--skip".into(), skip.to_string()]);
        }
        args
    }

    /// The ignored tests this run must pass: libtest's own `--list` of the same selection.
    fn expected(&self) -> Vec<String> {
        let output = Command::new(std::env::current_exe().expect("the test binary's path"))
            .args(["--list", "--ignored", "--format", "terse"])
            .args(self.selection())
            .output()
            .expect("list the tests");
        assert!(output.status.success(), "--list failed: {output:?}");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.strip_suffix(": test"))
            .map(str::to_string)
            .collect()
    }

    /// Runs the selected tests (all `#[ignore]`d GPU tests) in a child on the simulator, one
    /// test at a time, prints each child test's line, the tally and the simulator's report,
    /// and panics unless every expected test passed and the report is clean.
    ///
    /// Report policy: the child process's own report must have no violation and no leak.
    /// The one exception is `primary_context`, at most one retain per device: a thread-local
    /// primary-context cache of a thread still alive at exit holds one retain per device it
    /// used (the library's documented caching; `handles_cuda::exec::clear_primary_cache` drops it).
    /// Tests that start processes of their own (IPC importers, exit tests) give those
    /// grandchildren reports of their own (`%p` in the path); they are printed, not checked
    /// here: some leave handles alive or show a driver bug on purpose, and their tests assert
    /// what matters.
    pub fn run(&self) {
        for (name, reason) in self.not_simulated {
            say(format!("    not simulated: {name}: {reason}"));
        }
        let expected = self.expected();
        assert!(
            !expected.is_empty(),
            "{}: the selection names no test",
            self.label
        );
        let scratch = Scratch::new(&self.label.replace([' ', ','], "_"));
        let mut command = this_binary();
        command
            .args(["--include-ignored", "--test-threads=1"])
            .args(self.selection())
            .sim_devices(self.devices)
            // Any violation aborts the child at once, with the report line on stderr.
            .sim_strict()
            .sim_report(scratch.join("report-%p.json"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in self.env {
            command.env(key, value);
        }
        let started = std::time::Instant::now();
        let child = command.spawn().expect("start the child test binary");
        let pid = child.id();
        let output = child.wait_with_output().expect("wait for the child");
        let seconds = started.elapsed().as_secs_f64();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let test_lines = stdout
            .lines()
            .filter(|line| line.starts_with("test ") && !line.starts_with("test result:"));
        for line in test_lines {
            say(format!("    {line}"));
        }
        let tally = tally(&stdout).unwrap_or_default();
        say(format!(
            "on the simulator ({}): {} passed, {} failed, {} not simulated, in {seconds:.1} s",
            self.label,
            tally.passed,
            tally.failed,
            self.not_simulated.len()
        ));
        let own = scratch.join(&format!("report-{pid}.json"));
        let report = Report::read(&own);
        if let Ok(report) = &report {
            say(format!(
                "on the simulator ({}): report: {}; leaks: {}",
                self.label,
                describe_violations(report, 5),
                describe_leaks(&report.leaks)
            ));
        }
        self.print_grandchildren(&scratch, &own);

        let context = || {
            format!(
                "child status {:?}\n--- child stdout\n{}\n--- child stderr (tail)\n{}",
                output.status,
                tail(&stdout, 200),
                tail(&stderr, 40)
            )
        };
        assert!(
            output.status.success() && tally.failed == 0,
            "{}: tests failed on the simulator\n{}",
            self.label,
            context()
        );
        let passed: Vec<&str> = stdout
            .lines()
            .filter_map(|line| line.strip_prefix("test ")?.strip_suffix(" ... ok"))
            .collect();
        let missing: Vec<&String> = expected
            .iter()
            .filter(|name| !passed.contains(&name.as_str()))
            .collect();
        assert!(
            missing.is_empty() && tally.passed == expected.len(),
            "{}: expected {} passing tests ({expected:?}), {} passed; missing {missing:?}\n{}",
            self.label,
            expected.len(),
            tally.passed,
            context()
        );
        let report = report.unwrap_or_else(|error| panic!("{}: {error}", self.label));
        assert!(
            report.violations.is_empty(),
            "{}: the simulator reported {}",
            self.label,
            describe_violations(&report, 10)
        );
        let leaks = report.leaks_without_primary();
        let primary = report.leaks.get("primary_context").copied().unwrap_or(0);
        assert!(
            leaks.is_empty() && primary <= self.devices as u64,
            "{}: resources alive at exit: {}",
            self.label,
            describe_leaks(&report.leaks)
        );
    }

    fn print_grandchildren(&self, scratch: &Scratch, own: &Path) {
        let Ok(entries) = std::fs::read_dir(&scratch.0) else {
            return;
        };
        let mut others: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path != own)
            .collect();
        others.sort();
        for path in others {
            let name = path.file_stem().unwrap_or_default().to_string_lossy();
            match Report::read(&path) {
                Ok(report) => say(format!(
                    "    grandchild {name} (started by a test; not checked here): {}; leaks: {}",
                    describe_violations(&report, 0),
                    describe_leaks(&report.leaks)
                )),
                Err(error) => say(format!("    grandchild {name}: {error}")),
            }
        }
    }
}

/// Runs `command` and returns its output and the report it wrote at `report`, if any.
pub fn run_with_report(command: &mut Command, report: &Path) -> (Output, Option<Report>) {
    let _ = std::fs::remove_file(report);
    command.sim_report(report);
    let output = command.output().expect("run the child");
    let parsed = Report::read(report).ok();
    let _ = std::fs::remove_file(report);
    (output, parsed)
}

/// The environment variable a scenario child is started with: the scenario's name.
pub const SCENARIO: &str = "HANDLES_SIM_SCENARIO";

/// Runs this binary's `#[ignore]`d test `scenario_<name>` as a child on the simulator, with the
/// driver calls `fail` injected and the extra environment `env`; checks that the child passed
/// and wrote a report, prints the report's summary, and returns it. The caller asserts what
/// the report must (or may) contain.
pub fn run_scenario(name: &str, fail: &[(&str, u64, &str)], env: &[(&str, &str)]) -> Report {
    let (report, _) = run_child(name, fail, env);
    say(format!(
        "scenario {name} on the simulator: {}; leaks: {}",
        describe_violations(&report, 5),
        describe_leaks(&report.leaks)
    ));
    report
}

/// [`run_scenario`]'s child run, without the summary: checks that the child passed its one
/// test and wrote a report, and returns the report with the child's output (its own lines,
/// for callers that show or check them).
pub fn run_child(name: &str, fail: &[(&str, u64, &str)], env: &[(&str, &str)]) -> (Report, Output) {
    let scratch = Scratch::new(name);
    let test = format!("scenario_{name}");
    let mut command = this_binary();
    command
        .args([
            test.as_str(),
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO, name)
        .envs(env.iter().copied());
    if !fail.is_empty() {
        command.sim_fail(fail);
    }
    let (output, report) = run_with_report(&mut command, &scratch.join("report.json"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "scenario {name} failed ({:?}):\n{}\n{}",
        output.status,
        tail(&stdout, 30),
        tail(&String::from_utf8_lossy(&output.stderr), 30)
    );
    let report = report.unwrap_or_else(|| panic!("scenario {name} wrote no report"));
    (report, output)
}

/// Aborts the process (a finding: a hang) unless dropped within `secs`: a scenario child's
/// guard, so that a program that hangs fails its parent instead of stalling the suite.
pub struct Watchdog(std::sync::Arc<std::sync::atomic::AtomicBool>);

/// Starts a [`Watchdog`] for `what`.
pub fn watchdog(secs: u64, what: &'static str) -> Watchdog {
    use std::sync::atomic::Ordering;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = done.clone();
    std::thread::spawn(move || {
        let start = std::time::Instant::now();
        while !seen.load(Ordering::SeqCst) {
            if start.elapsed() > std::time::Duration::from_secs(secs) {
                say(format!("HANG: {what} still running after {secs} s"));
                std::process::abort();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
    Watchdog(done)
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Asserts what a child that exited with a release still waiting must show: no violation, the
/// one allocation leaked, and the leak reported at exit on its standard error.
pub fn assert_leaked_at_exit(name: &str, report: &Report, stderr: &str) {
    assert!(
        report.violations.is_empty(),
        "{name}: {:?}",
        report.violations
    );
    assert_eq!(
        report.leaks.get("allocation"),
        Some(&1),
        "{name}: {:?}",
        report.leaks
    );
    assert!(
        stderr.contains("at exit (leaked)"),
        "{name}: the leak at exit is not reported:\n{}",
        tail(stderr, 10)
    );
}

/// Declares a scenario: the test `$parent`, which runs `$child` (an ignored test: the program
/// itself) as a child through the calling file's `run(name, fail, env) -> Report` and asserts
/// its report clean. Without `fail` and `env`, none are injected and the file's `ENV` is set.
#[allow(unused_macros)]
macro_rules! clean_scenario {
    ($parent:ident, $child:ident, $body:block) => {
        $crate::simulator::clean_scenario!($parent, $child, &[], ENV, $body);
    };
    ($parent:ident, $child:ident, $fail:expr, $env:expr, $body:block) => {
        #[test]
        fn $parent() {
            let name = stringify!($parent);
            let report = run(name, $fail, $env);
            $crate::simulator::assert_clean(name, &report);
        }
        #[test]
        #[ignore = "a scenario"]
        fn $child() $body
    };
}
#[allow(unused_imports)]
pub(crate) use clean_scenario;

/// Asserts a scenario's report shows no violation and no leak (primary-context retains aside,
/// which thread caches keep until exit).
pub fn assert_clean(name: &str, report: &Report) {
    assert!(
        report.violations.is_empty(),
        "{name}: {}",
        describe_violations(report, 10)
    );
    assert!(
        report.leaks_without_primary().is_empty(),
        "{name}: leaked {}",
        describe_leaks(&report.leaks)
    );
}

/// Runs scenario `name` on the strict simulator with `devices` simulated devices, and asserts
/// its report is clean ([`assert_clean`]).
pub fn strict_clean(name: &str, devices: &str) {
    let env = [("CUDA_SIM_STRICT", "1"), ("CUDA_SIM_DEVICES", devices)];
    assert_clean(name, &run_scenario(name, &[], &env));
}

/// Panics unless this process is a scenario child on the simulator: a scenario run directly
/// (on a real GPU, say) must not pass silently.
pub fn in_scenario() {
    assert!(
        std::env::var_os(SCENARIO).is_some(),
        "scenarios run only as children on the simulator, started by their parent test"
    );
    handles_tests::trace_crashes_if_asked();
}
