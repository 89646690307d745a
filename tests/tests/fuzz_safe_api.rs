//! A fuzzer of handles-cuda's safe API: random programs of safe calls over every public
//! resource, each run in a child process on the strict simulator (`cuda-sim`, every
//! check on but `data-race` and `uninitialized-read`, which judge the program's bytes, not the
//! library; the first violation aborts the child), judged by an oracle:
//!
//! - the simulator reports no violation;
//! - no panic escapes the library (the interpreter catches panics only where the API
//!   propagates a panic the program raised on purpose) and the process does not abort or hang;
//! - nothing is left at exit unless a report-hook line accounts for it (programs that end by
//!   dropping everything);
//! - a completion whose event completed resolves; a host view is never written under;
//! - `Error::InvalidArgument` strings the library returns are listed (typed variants are the
//!   rule for refusals the library detects).
//!
//! A failing program is shrunk (proptest's value trees, then single ops) to a minimal one,
//! printed as its text (for `tests/fuzz-corpus/`) and as the Rust calls it made.
//!
//! The kept corpus (`tests/fuzz-corpus/*.prog`, embedded at compile time) runs first: one
//! minimal program per defect the fuzzer was shown to find (F2, F5-F10, F12 of issue 37; N1-N4,
//! N6 and the simulator's S4, which it found itself), and correct programs that must stay clean.
//! Then [`CI_CASES`] random programs. Settings, all optional (environment):
//!
//! | variable | meaning |
//! |---|---|
//! | `FUZZ_CASES=N` | random programs to run (default [`CI_CASES`]) |
//! | `FUZZ_SEED=S` | the first case's seed (default: from the clock, printed); case `i` uses `S + i` |
//! | `FUZZ_PRINT=1` | print each random program before it runs |
//! | `FUZZ_FIND=a\|b` | time-to-find: only a failure whose signature contains `a` or `b` stops the run |
//! | `FUZZ_FIND_WITHOUT=Op` | with `FUZZ_FIND`: a failing program that holds an `Op` does not count |
//! | `FUZZ_LEAVE_OUT=Op\|Op` | random programs are generated without these ops (to look past a known finding) |
//! | `FUZZ_IGNORE=a\|b` | failures whose signature contains `a` or `b` are counted, and do not stop the run |
//! | `FUZZ_CORPUS=0` / `FUZZ_RANDOM=0` | skip the corpus / the random programs |
//! | `FUZZ_OPEN=1` | also run the open findings (`tests/fuzz-corpus/open/`), printed, not asserted |
//! | `FUZZ_PROGRAM_FILE=path` | run this one program (its text form) and print its trace; an absolute path (cargo runs the test in `tests/`) |
//! | `FUZZ_SHRINK=N` | child runs spent shrinking a failure (default 400; 0: no shrinking) |
//! | `FUZZ_JOBS=N` | children at once (default: the machine's parallelism, at most 4) |
//! | `FUZZ_MAX_GROUPS=N` | the longest program, in ops and idioms (default 24) |
//! | `FUZZ_STATS=1` | also print how often each kind of op found its slots empty, and its errors |
//!
//! A longer run: `FUZZ_CASES=5000 cargo test -p handles-tests --test fuzz_safe_api --release`.
//! One case again: `FUZZ_SEED=<its seed> FUZZ_CASES=1 FUZZ_CORPUS=0 FUZZ_PRINT=1 cargo test ...`.

mod fuzz;
mod simulator;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use fuzz::program::Program;
use fuzz::runner::{PROGRAM_ENV, Verdict, generate, normalize, run_program, shrink};
use proptest::strategy::ValueTree;
use simulator::{Scratch, say};

/// Random programs per CI run: about two minutes on a 2-core machine, two children at once
/// (measured: 5000 programs in 305 s, 16.4 programs per second). Every reverted fix of the
/// mutation table was found within its first 60 programs.
const CI_CASES: usize = 2000;

/// The kept corpus: each defect's minimal program (F2, F5-F10 and F12 of issue 37; N1-N4, N6,
/// N8 and the simulator's S4, S6 and S7, which the fuzzer found; N7, an oracle's miscount), and
/// programs that must stay clean.
const CORPUS: &[(&str, &str)] = &[
    (
        "f2_record_drop_panics_during_unwind",
        include_str!("../fuzz-corpus/f2_record_drop_panics_during_unwind.prog"),
    ),
    (
        "f5_block_size_function_unbinds_green",
        include_str!("../fuzz-corpus/f5_block_size_function_unbinds_green.prog"),
    ),
    (
        "f6_completion_behind_busy_notifiers",
        include_str!("../fuzz-corpus/f6_completion_behind_busy_notifiers.prog"),
    ),
    (
        "f7_conditional_without_default_or_setter",
        include_str!("../fuzz-corpus/f7_conditional_without_default_or_setter.prog"),
    ),
    (
        "f8_host_function_panics_with_last_handle",
        include_str!("../fuzz-corpus/f8_host_function_panics_with_last_handle.prog"),
    ),
    (
        "f9_tensor_map_in_released_primary",
        include_str!("../fuzz-corpus/f9_tensor_map_in_released_primary.prog"),
    ),
    (
        "f9_kernel_attribute_in_released_primary",
        include_str!("../fuzz-corpus/f9_kernel_attribute_in_released_primary.prog"),
    ),
    (
        "f10_exit_after_sync_with_captures",
        include_str!("../fuzz-corpus/f10_exit_after_sync_with_captures.prog"),
    ),
    (
        "f10_thread_exits_with_green_bound",
        include_str!("../fuzz-corpus/f10_thread_exits_with_green_bound.prog"),
    ),
    (
        "f12_switch_of_huge_count",
        include_str!("../fuzz-corpus/f12_switch_of_huge_count.prog"),
    ),
    (
        "n1_conditional_set_with_no_node",
        include_str!("../fuzz-corpus/n1_conditional_set_with_no_node.prog"),
    ),
    (
        "n2_conditional_setter_not_before_node",
        include_str!("../fuzz-corpus/n2_conditional_setter_not_before_node.prog"),
    ),
    (
        "n3_cudarc_slice_dropped_on_another_thread",
        include_str!("../fuzz-corpus/n3_cudarc_slice_dropped_on_another_thread.prog"),
    ),
    (
        "n3_cudarc_slice_dropped_with_green_bound",
        include_str!("../fuzz-corpus/n3_cudarc_slice_dropped_with_green_bound.prog"),
    ),
    (
        "n4_panicking_records_chain",
        include_str!("../fuzz-corpus/n4_panicking_records_chain.prog"),
    ),
    (
        "n6_cudarc_slice_of_another_device",
        include_str!("../fuzz-corpus/n6_cudarc_slice_of_another_device.prog"),
    ),
    (
        "n8_cudarc_slice_dropped_in_a_capture",
        include_str!("../fuzz-corpus/n8_cudarc_slice_dropped_in_a_capture.prog"),
    ),
    (
        "n7_token_use_with_no_context_is_refused",
        include_str!("../fuzz-corpus/n7_token_use_with_no_context_is_refused.prog"),
    ),
    (
        "s4_vmm_peer_mapping_touched_by_its_peer",
        include_str!("../fuzz-corpus/s4_vmm_peer_mapping_touched_by_its_peer.prog"),
    ),
    (
        "s6_exec_replaced_while_its_launch_waits",
        include_str!("../fuzz-corpus/s6_exec_replaced_while_its_launch_waits.prog"),
    ),
    (
        "s7_exec_replaced_while_its_setting_launch_waits",
        include_str!("../fuzz-corpus/s7_exec_replaced_while_its_setting_launch_waits.prog"),
    ),
    (
        "ok_streams_graphs_and_ipc",
        include_str!("../fuzz-corpus/ok_streams_graphs_and_ipc.prog"),
    ),
    (
        "ok_completions_and_host_functions",
        include_str!("../fuzz-corpus/ok_completions_and_host_functions.prog"),
    ),
];

/// Open findings of the fuzzer (`tests/fuzz-corpus/open/`): minimal programs that fail the
/// oracle until their fix lands, run only with `FUZZ_OPEN=1` and printed, not asserted. A fixed
/// one moves to [`CORPUS`] (N1-N4, N6 and S4 did).
const OPEN: &[(&str, &str)] = &[(
    "s5_exec_dropped_while_its_launch_waits",
    include_str!("../fuzz-corpus/open/s5_exec_dropped_while_its_launch_waits.prog"),
)];

/// The run's settings, from the environment.
struct Settings {
    cases: usize,
    seed: u64,
    print: bool,
    find: Option<String>,
    find_without: Option<String>,
    ignore: Vec<String>,
    leave_out: Vec<String>,
    corpus: bool,
    open: bool,
    random: bool,
    program_file: Option<String>,
    shrink_budget: usize,
    jobs: usize,
    max_groups: usize,
}

fn var<T: std::str::FromStr>(name: &str) -> Option<T> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not valid")),
    )
}

fn list(name: &str) -> Vec<String> {
    std::env::var(name)
        .map(|list| {
            list.split('|')
                .filter(|part| !part.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn settings() -> Settings {
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let parallelism = std::thread::available_parallelism().map_or(2, |n| n.get());
    Settings {
        cases: var("FUZZ_CASES").unwrap_or(CI_CASES),
        seed: var("FUZZ_SEED").unwrap_or(clock % 1_000_000_000),
        print: var::<u8>("FUZZ_PRINT").is_some_and(|v| v != 0),
        find: std::env::var("FUZZ_FIND").ok().filter(|f| !f.is_empty()),
        find_without: std::env::var("FUZZ_FIND_WITHOUT")
            .ok()
            .filter(|f| !f.is_empty()),
        ignore: list("FUZZ_IGNORE"),
        leave_out: list("FUZZ_LEAVE_OUT"),
        corpus: var::<u8>("FUZZ_CORPUS").is_none_or(|v| v != 0),
        open: var::<u8>("FUZZ_OPEN").is_some_and(|v| v != 0),
        random: var::<u8>("FUZZ_RANDOM").is_none_or(|v| v != 0),
        program_file: std::env::var("FUZZ_PROGRAM_FILE").ok(),
        shrink_budget: var("FUZZ_SHRINK").unwrap_or(400),
        jobs: var("FUZZ_JOBS").unwrap_or(parallelism.clamp(1, 4)),
        max_groups: var("FUZZ_MAX_GROUPS").unwrap_or(24),
    }
}

/// Prints a failing program: its problems, its text and the Rust calls it made.
fn print_failure(label: &str, program: &Program, verdict: &Verdict) {
    say(format!(
        "{label}: FAILED: {}",
        verdict.problems.join("\n    ")
    ));
    say(format!(
        "--- the program ({} ops; for tests/fuzz-corpus/):\n{}",
        program.ops.len(),
        program.encode()
    ));
    for line in &verdict.reports {
        say(format!("--- report hook: {line}"));
    }
    say("--- as Rust calls (the child's trace):");
    for line in &verdict.trace {
        say(format!("    {line}"));
    }
    if !verdict.stderr_tail.trim().is_empty() {
        say(format!("--- child stderr (tail):\n{}", verdict.stderr_tail));
    }
}

/// Tallies of a run.
#[derive(Default)]
struct Tally {
    programs: usize,
    ops: usize,
    skipped: usize,
    skipped_by_op: BTreeMap<String, usize>,
    errors_by_op: BTreeMap<String, usize>,
    seconds: f64,
    string_errors: BTreeMap<String, usize>,
    reports: BTreeMap<String, usize>,
    other_failures: BTreeMap<String, usize>,
}

impl Tally {
    fn add(&mut self, program: &Program, verdict: &Verdict) {
        self.programs += 1;
        self.ops += program.ops.len();
        let mut current = "";
        for line in &verdict.trace {
            if let Some(rest) = line.strip_prefix("// op ") {
                current = rest.split_whitespace().nth(1).unwrap_or("");
            } else if line.contains("// skipped:") {
                self.skipped += 1;
                *self.skipped_by_op.entry(current.to_string()).or_default() += 1;
            } else if let Some(at) = line.find("// -> Err(") {
                let error = &line[at + "// -> Err(".len()..];
                let variant = error
                    .split(|c: char| !c.is_alphanumeric())
                    .next()
                    .unwrap_or("");
                let detail = if variant == "Driver" {
                    error
                        .split("name: \"")
                        .nth(1)
                        .and_then(|rest| rest.split('"').next())
                        .unwrap_or("")
                } else {
                    ""
                };
                *self
                    .errors_by_op
                    .entry(format!("{current}: {variant} {detail}"))
                    .or_default() += 1;
            }
        }
        self.seconds += verdict.seconds;
        for message in &verdict.string_errors {
            *self.string_errors.entry(normalize(message)).or_default() += 1;
        }
        for line in &verdict.reports {
            *self.reports.entry(normalize(line)).or_default() += 1;
        }
    }
}

/// Runs `jobs` workers over `count` items, each calling `work(index)` until `stop` is set.
fn in_parallel(jobs: usize, count: usize, stop: &AtomicBool, work: impl Fn(usize) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= count {
                        break;
                    }
                    work(index);
                }
            });
        }
    });
}

/// Runs `corpus`; returns the names of the programs that failed.
fn run_corpus(
    settings: &Settings,
    scratch: &Scratch,
    label: &str,
    corpus: &[(&str, &str)],
) -> Vec<String> {
    let failed = Mutex::new(Vec::new());
    let never = AtomicBool::new(false);
    in_parallel(settings.jobs, corpus.len(), &never, |index| {
        let (name, text) = corpus[index];
        let program = Program::decode(text)
            .unwrap_or_else(|error| panic!("{label} {name}: not a program: {error}"));
        let verdict = run_program(&program, scratch, 1_000_000 + index);
        if verdict.passed() {
            say(format!("{label} {name}: ok ({:.1} s)", verdict.seconds));
        } else {
            print_failure(&format!("{label} {name}"), &program, &verdict);
            failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!(
                    "{name}: {}",
                    verdict.problems.first().cloned().unwrap_or_default()
                ));
        }
    });
    failed.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// A random case that failed: its seed, its verdict, and when it was found.
struct Found {
    seed: u64,
    case: usize,
    verdict: Verdict,
    after: f64,
}

#[test]
fn fuzz_safe_api() {
    assert!(
        cuda_sim::is_built(),
        "the simulator's libcuda.so is not built (cargo builds it with this test)"
    );
    let settings = settings();
    let scratch = Scratch::new("fuzz");
    if let Some(path) = &settings.program_file {
        let text = std::fs::read_to_string(path).expect("read FUZZ_PROGRAM_FILE");
        let program = Program::decode(&text).expect("a program");
        let verdict = run_program(&program, &scratch, 0);
        for line in &verdict.trace {
            say(format!("    {line}"));
        }
        if verdict.passed() {
            say(format!("{path}: ok ({:.1} s)", verdict.seconds));
        } else {
            print_failure(path, &program, &verdict);
            panic!("{path}: {}", verdict.problems.join("; "));
        }
        return;
    }
    if settings.open {
        let failed = run_corpus(&settings, &scratch, "open", OPEN);
        say(format!(
            "open findings: {} programs, {} still fail",
            OPEN.len(),
            failed.len()
        ));
    }
    if settings.corpus {
        let started = Instant::now();
        let failed = run_corpus(&settings, &scratch, "corpus", CORPUS);
        say(format!(
            "corpus: {} programs in {:.1} s, {} failed",
            CORPUS.len(),
            started.elapsed().as_secs_f64(),
            failed.len()
        ));
        assert!(
            failed.is_empty(),
            "corpus programs failed the oracle:\n  {}",
            failed.join("\n  ")
        );
    }
    if !settings.random {
        return;
    }
    say(format!(
        "fuzz: {} random programs from seed {} ({} at once); again: FUZZ_SEED={} FUZZ_CASES={}",
        settings.cases, settings.seed, settings.jobs, settings.seed, settings.cases
    ));
    let prepare = |mut program: Program| {
        program
            .ops
            .retain(|op| !settings.leave_out.iter().any(|name| name == op.name()));
        program
    };
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    let tally = Mutex::new(Tally::default());
    let found: Mutex<Option<Found>> = Mutex::new(None);
    in_parallel(settings.jobs, settings.cases, &stop, |case| {
        let seed = settings.seed.wrapping_add(case as u64);
        let program = prepare(generate(seed, settings.max_groups).current());
        if settings.print {
            say(format!("case {case} (seed {seed}):\n{}", program.encode()));
        }
        let verdict = run_program(&program, &scratch, case);
        let mut tally = tally.lock().unwrap_or_else(|e| e.into_inner());
        tally.add(&program, &verdict);
        if verdict.passed() {
            return;
        }
        let signature = verdict.signature.clone().unwrap_or_default();
        let wanted = settings.find.as_ref().is_none_or(|text| {
            text.split('|')
                .any(|alternative| signature.contains(alternative))
        }) && !settings
            .ignore
            .iter()
            .any(|text| signature.contains(text.as_str()))
            && settings
                .find_without
                .as_ref()
                .is_none_or(|op| !program.ops.iter().any(|held| held.name() == op.as_str()));
        if !wanted {
            *tally.other_failures.entry(signature).or_default() += 1;
            return;
        }
        drop(tally);
        let mut slot = found.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            stop.store(true, Ordering::Relaxed);
            *slot = Some(Found {
                seed,
                case,
                verdict,
                after: started.elapsed().as_secs_f64(),
            });
        }
    });
    let tally = tally.into_inner().unwrap_or_else(|e| e.into_inner());
    let wall = started.elapsed().as_secs_f64();
    say(format!(
        "fuzz: {} programs, {} ops ({:.0}% skipped on an empty slot) in {wall:.1} s ({:.1} programs/s, {:.2} s per child)",
        tally.programs,
        tally.ops,
        100.0 * tally.skipped as f64 / tally.ops.max(1) as f64,
        tally.programs as f64 / wall.max(1e-9),
        tally.seconds / tally.programs.max(1) as f64,
    ));
    if var::<u8>("FUZZ_STATS").is_some_and(|v| v != 0) {
        let mut skipped: Vec<_> = tally.skipped_by_op.iter().collect();
        skipped.sort_by(|a, b| b.1.cmp(a.1));
        say(format!("    skipped ops by kind: {skipped:?}"));
        let mut errors: Vec<_> = tally.errors_by_op.iter().collect();
        errors.sort_by(|a, b| b.1.cmp(a.1));
        for (what, count) in errors {
            say(format!("    Err by op ({count}): {what}"));
        }
    }
    for (message, count) in &tally.string_errors {
        say(format!(
            "    Error::InvalidArgument returned {count} time(s): {message}"
        ));
    }
    for (line, count) in &tally.reports {
        say(format!("    report hook ({count}): {line}"));
    }
    for (signature, count) in &tally.other_failures {
        say(format!(
            "    other failure, not the one looked for, or ignored ({count}): {signature}"
        ));
    }
    let Some(found) = found.into_inner().unwrap_or_else(|e| e.into_inner()) else {
        if let Some(text) = &settings.find {
            panic!(
                "fuzz: no failure matching {text:?} in {} programs",
                tally.programs
            );
        }
        say("fuzz: no failure");
        return;
    };
    say(format!(
        "fuzz: FOUND after {:.1} s and {} programs (case {}, seed {}): {}",
        found.after,
        tally.programs,
        found.case,
        found.seed,
        found.verdict.signature.clone().unwrap_or_default()
    ));
    let tree = generate(found.seed, settings.max_groups);
    let original = prepare(tree.current());
    let shrunk = shrink(
        tree,
        prepare,
        found.verdict,
        &scratch,
        settings.shrink_budget,
    );
    say(format!(
        "fuzz: shrunk from {} to {} ops in {} runs",
        original.ops.len(),
        shrunk.program.ops.len(),
        shrunk.runs
    ));
    print_failure(
        &format!("seed {}", found.seed),
        &shrunk.program,
        &shrunk.verdict,
    );
    panic!(
        "fuzz: seed {} fails the oracle: {}",
        found.seed,
        shrunk.verdict.problems.join("; ")
    );
}

/// The child: runs the program the parent passed (`HANDLES_FUZZ_PROGRAM`) on the simulator.
#[test]
#[ignore = "a child of fuzz_safe_api; runs on the simulator"]
fn fuzz_child() {
    let text = std::env::var(PROGRAM_ENV)
        .expect("fuzz_child runs only as a child of fuzz_safe_api, on the simulator");
    let program = Program::decode(&text).expect("the parent passes a valid program");
    fuzz::interp::run(&program);
}
