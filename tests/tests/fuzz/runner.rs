//! The parent's side: runs a program in a child process on the strict simulator, reads what
//! the child printed and what the simulator reported, and judges it (the oracle); shrinks a
//! failing program with proptest's value trees.

use std::collections::BTreeMap;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use cuda_sim::{Report, SimCommand};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use super::program::{Program, program};
use crate::simulator::{Scratch, tail, this_binary};

/// The environment variable that carries a program to the child.
pub const PROGRAM_ENV: &str = "HANDLES_FUZZ_PROGRAM";

/// The longest a child may run before it counts as hung.
const CHILD_LIMIT: Duration = Duration::from_secs(90);

/// What one child run showed, judged.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Each problem found, as one line; empty when the program passed.
    pub problems: Vec<String>,
    /// The first problem with numbers and addresses blanked out: what shrinking keeps.
    pub signature: Option<String>,
    /// `Error::InvalidArgument` strings the library returned (recorded, not failed).
    pub string_errors: Vec<String>,
    /// The report hook's lines (deleter failures, caught panics).
    pub reports: Vec<String>,
    /// The child's trace: the program as the Rust calls it made.
    pub trace: Vec<String>,
    /// The tail of the child's stderr.
    pub stderr_tail: String,
    /// Wall time of the child.
    pub seconds: f64,
}

impl Verdict {
    /// Whether the oracle passed.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Digits and hex numbers replaced by `#`, for comparing failures across runs.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_number = false;
    for word in text.split_inclusive(|c: char| !c.is_ascii_alphanumeric()) {
        let (core, tail) = match word.char_indices().last() {
            Some((i, c)) if !c.is_ascii_alphanumeric() => (&word[..i], &word[i..]),
            _ => (word, ""),
        };
        let numeric = !core.is_empty()
            && (core.chars().all(|c| c.is_ascii_digit())
                || (core.starts_with("0x") && core[2..].chars().all(|c| c.is_ascii_hexdigit())));
        if numeric {
            if !in_number {
                out.push('#');
            }
            in_number = tail.is_empty();
        } else {
            out.push_str(core);
            in_number = false;
        }
        out.push_str(tail);
    }
    out
}

/// The handle type whose deleter frees resources of the simulator's leak type `kind`.
fn handle_type_of_leak(kind: &str) -> Option<&'static str> {
    match kind {
        "stream" => Some("Stream"),
        "event" => Some("Event"),
        "pool" => Some("MemoryPool"),
        "allocation" | "sync_allocation" | "host_allocation" | "managed_allocation" | "import" => {
            Some("DevicePtr")
        }
        "context" => Some("Context"),
        "library" | "module" => Some("Library"),
        "graph" => Some("Graph"),
        "graph_exec" => Some("GraphExec"),
        "green_context" => Some("GreenContext"),
        "physical_allocation" => Some("PhysicalAllocation"),
        "reservation" => Some("AddressReservation"),
        "mapping" => Some("Mapping"),
        _ => None,
    }
}

/// Leaks not accounted for by a report-hook line: each line `"Type 0xraw: error"` of a
/// deleter failure accounts for one leaked resource of its type (and what a failed destroy or
/// free keeps alive on purpose).
fn unexplained_leaks(report: &Report, reports: &[String]) -> BTreeMap<String, u64> {
    let mut budget: BTreeMap<&str, u64> = BTreeMap::new();
    for line in reports {
        let handle_type = line.split(' ').next().unwrap_or("");
        *budget.entry(handle_type).or_default() += 1;
        let kept: &[&str] = match handle_type {
            "Stream" => &["Context", "GreenContext"],
            // Pool memory whose free failed keeps its owned pool for good (`free_allocation`):
            // destroying the pool would free the memory under work that may still run.
            "DevicePtr" => &["MemoryPool"],
            "Mapping" => &["AddressReservation", "PhysicalAllocation"],
            "GraphExec" => &["Graph", "Library", "DevicePtr", "Event", "Context"],
            _ => &[],
        };
        for owner in kept {
            *budget.entry(owner).or_default() += 1;
        }
    }
    let mut unexplained = BTreeMap::new();
    for (kind, count) in report.leaks_without_primary() {
        let left = handle_type_of_leak(&kind).and_then(|handle_type| budget.get_mut(handle_type));
        match left {
            Some(left) if *left >= count => *left -= count,
            _ => {
                unexplained.insert(kind, count);
            }
        }
    }
    unexplained
}

fn lines_tagged(stdout: &str, tag: &str) -> Vec<String> {
    let marker = format!("{tag}: ");
    stdout
        .lines()
        .filter_map(|line| Some(line[line.find(&marker)? + marker.len()..].to_string()))
        .collect()
}

#[cfg(unix)]
fn signal_of(status: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// Runs `program` in a child on the strict simulator and judges it.
pub fn run_program(program: &Program, scratch: &Scratch, index: usize) -> Verdict {
    let started = Instant::now();
    let report_path = scratch.join(&format!("report-{index}.json"));
    let stdout_path = scratch.join(&format!("stdout-{index}.txt"));
    let stderr_path = scratch.join(&format!("stderr-{index}.txt"));
    let _ = std::fs::remove_file(&report_path);
    let mut command: Command = this_binary();
    command
        .args([
            "fuzz_child",
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PROGRAM_ENV, program.encode())
        .env("RUST_BACKTRACE", "0")
        .sim_devices(program.devices.max(1) as usize)
        .sim_strict()
        // A random program's own unordered or unwritten bytes are its bugs, not the library's:
        // the bytes are the caller's to order (DESIGN.md), the lifetimes the library's.
        .sim_check_data_race(false)
        .sim_check_initcheck(false)
        .sim_report(&report_path)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("a stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("a stderr file"));
    let mut child = command.spawn().expect("start the fuzz child");
    let mut hung = false;
    let status = loop {
        match child.try_wait().expect("wait for the fuzz child") {
            Some(status) => break status,
            None if started.elapsed() > CHILD_LIMIT => {
                hung = true;
                let _ = child.kill();
                break child.wait().expect("wait for the killed child");
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let report = Report::read(&report_path).ok();
    let _ = (
        std::fs::remove_file(&report_path),
        std::fs::remove_file(&stdout_path),
        std::fs::remove_file(&stderr_path),
    );
    judge(&status, hung, &stdout, &stderr, report.as_ref(), seconds)
}

fn judge(
    status: &ExitStatus,
    hung: bool,
    stdout: &str,
    stderr: &str,
    report: Option<&Report>,
    seconds: f64,
) -> Verdict {
    let mut problems = Vec::new();
    let done = lines_tagged(stdout, "fuzz-done");
    let reports = lines_tagged(stdout, "fuzz-report");
    let panics = lines_tagged(stdout, "fuzz-panic");
    for line in lines_tagged(stdout, "fuzz-fail") {
        problems.push(format!("oracle: {line}"));
    }
    // The program panics only with payloads of its own, which are not strings: a caught panic
    // with a message is the library's own, caught where no caller could see it. One is not a
    // defect: a program that exits with its handles alive leaves its streams' work running, and
    // what that work hands to the disposal thread during the exit flush (a completion's waker,
    // a host function's captures) is reported as left there, a leak of the program's own.
    let live = done.iter().any(|how| how == "live");
    for line in &reports {
        if live && line.starts_with("values on the disposal thread at exit (leaked)") {
            continue;
        }
        if let Some((_, message)) = line.split_once("panicked: ")
            && message != "a panic with a non-string payload"
        {
            problems.push(format!("panic caught and reported: {line}"));
        }
    }
    if let Some(report) = report {
        for violation in &report.violations {
            problems.push(format!(
                "violation {} in {}: {}",
                violation.kind, violation.call, violation.message
            ));
        }
    }
    if hung {
        problems.push(format!(
            "hang: the child ran over {} s",
            CHILD_LIMIT.as_secs()
        ));
    } else if let Some(signal) = signal_of(status) {
        if report.is_none_or(|report| report.violations.is_empty()) {
            let reason = [
                "panic in a destructor during cleanup",
                "memory allocation of",
                "fatal runtime error",
                "thread caused non-unwinding panic",
                "panic in a function that cannot unwind",
            ]
            .iter()
            .find_map(|needle| {
                stderr
                    .lines()
                    .find(|line| line.contains(needle))
                    .map(str::to_string)
            })
            .unwrap_or_else(|| format!("signal {signal}"));
            problems.push(format!("abort: {reason}"));
        }
    } else if !status.success() {
        let panic = panics.last().cloned().unwrap_or_else(|| tail(stderr, 3));
        problems.push(format!(
            "child failed ({status}): a panic escaped the interpreter: {panic}"
        ));
    } else if done.is_empty() {
        problems.push("the program did not finish".into());
    }
    if problems.is_empty() {
        // No report: the program made no driver call at all.
        match report {
            Some(report) if done.iter().any(|how| how == "teardown") => {
                let leaks = unexplained_leaks(report, &reports);
                if !leaks.is_empty() {
                    let kinds: Vec<String> =
                        leaks.iter().map(|(k, n)| format!("{k}: {n}")).collect();
                    problems.push(format!(
                        "leak: {} at exit, {} report-hook line(s)",
                        kinds.join(", "),
                        reports.len()
                    ));
                }
            }
            _ => {}
        }
    }
    let signature = problems.first().map(|problem| {
        // A violation's message names calls by number; its kind and call are the signature.
        let head = match problem.find(": ") {
            Some(at) if problem.starts_with("violation ") => &problem[..at],
            _ => problem.as_str(),
        };
        normalize(head)
    });
    Verdict {
        problems,
        signature,
        string_errors: lines_tagged(stdout, "fuzz-string-error"),
        reports,
        trace: lines_tagged(stdout, "fuzz-trace"),
        stderr_tail: tail(stderr, 12),
        seconds,
    }
}

/// How a failing case was shrunk.
pub struct Shrunk {
    /// The smallest program that still fails with the same signature.
    pub program: Program,
    /// Its verdict.
    pub verdict: Verdict,
    /// Child runs spent shrinking.
    pub runs: usize,
}

/// The generator's configuration for one case: a proptest runner seeded with `seed`.
fn runner_for(seed: u64) -> TestRunner {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&(!seed).to_le_bytes());
    TestRunner::new_with_rng(
        Config {
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

/// The program case `seed` generates, and the value tree that shrinks it.
pub fn generate(seed: u64, max_groups: usize) -> impl ValueTree<Value = Program> {
    let mut runner = runner_for(seed);
    program(max_groups)
        .new_tree(&mut runner)
        .expect("the program strategy never rejects")
}

/// Shrinks a failing case (`prepare` makes each candidate the program to run): proptest's
/// value-tree search (groups removed, then ops, then
/// fields simplified), keeping a candidate only if it fails with the same signature; then a
/// pass that removes single ops of the flattened program. At most `budget` child runs.
pub fn shrink(
    mut tree: impl ValueTree<Value = Program>,
    prepare: impl Fn(Program) -> Program,
    first: Verdict,
    scratch: &Scratch,
    budget: usize,
) -> Shrunk {
    let signature = first.signature.clone();
    let mut best = (prepare(tree.current()), first);
    let mut runs = 0;
    let fails_alike = |verdict: &Verdict| verdict.signature == signature;
    if tree.simplify() {
        while runs < budget {
            let candidate = prepare(tree.current());
            runs += 1;
            let verdict = run_program(&candidate, scratch, runs);
            let again = if fails_alike(&verdict) {
                best = (candidate, verdict);
                tree.simplify()
            } else {
                tree.complicate()
            };
            if !again {
                break;
            }
        }
    }
    // Single ops of the flattened program, last first.
    let mut at = best.0.ops.len();
    while at > 0 && runs < budget {
        at -= 1;
        let mut candidate = best.0.clone();
        candidate.ops.remove(at);
        runs += 1;
        let verdict = run_program(&candidate, scratch, runs);
        if fails_alike(&verdict) {
            best = (candidate, verdict);
        }
    }
    Shrunk {
        program: best.0,
        verdict: best.1,
        runs,
    }
}

/// The oracle's one exemption for caught panics, on made-up child output: values left on the
/// disposal thread at exit pass after a live exit (the program's own work still ran) and fail
/// after a teardown (everything was waited for and dropped first), as does any other caught
/// panic with a message after a live exit.
#[test]
fn a_live_exit_may_leave_values_on_the_disposal_thread_and_a_teardown_may_not() {
    use std::os::unix::process::ExitStatusExt;
    let exited = ExitStatus::from_raw(0);
    let left = "fuzz-report: values on the disposal thread at exit (leaked) 0x3: panicked: 3 \
                value(s) handed to the disposal thread were not dropped or released before the \
                process exited";
    let other = "fuzz-report: a value dropped on the disposal thread 0x1: panicked: boom";
    let problems = |how: &str, report: &str| {
        judge(
            &exited,
            false,
            &format!("fuzz-done: {how}\n{report}\n"),
            "",
            None,
            0.0,
        )
        .problems
    };
    assert!(problems("live", left).is_empty());
    assert_eq!(problems("teardown", left).len(), 1);
    assert_eq!(problems("live", other).len(), 1);
}
