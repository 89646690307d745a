//! Model check of the reach answer an allocation keeps (`memory/fixed_reach.rs`): threads that
//! check the same allocation from different devices at once, each working the answer out and
//! keeping it, only ever read nothing yet or a true answer for their own device. Run with
//! `RUSTFLAGS="--cfg handles_cuda_loom" cargo test -p handles-cuda --test loom_fixed_reach
//! --release`.
#![cfg(handles_cuda_loom)]

#[path = "../src/memory/fixed_reach.rs"]
#[allow(dead_code)]
mod fixed_reach;

use fixed_reach::{FixedReach, Known};
use loom::sync::Arc;

/// The fact the kept answer stands for: which devices' checks are fixed. `None` is memory no
/// device's check is ever fixed for (host access); `Some(devices)`, those devices (several
/// for memory whose check passes everywhere).
fn check(kept: &FixedReach, truth: Option<&[usize]>, ordinal: usize) -> bool {
    let fixed = truth.is_some_and(|devices| devices.contains(&ordinal));
    match kept.known(ordinal) {
        Known::Fixed => assert!(fixed, "device {ordinal} read as fixed, and it is not"),
        Known::NotFixed => {}
        Known::Unknown => match truth {
            None => kept.keep_never(),
            Some(_) if fixed => kept.keep_fixed(ordinal),
            Some(_) => {}
        },
    }
    fixed
}

fn race(truth: Option<&'static [usize]>) {
    loom::model(move || {
        let kept = Arc::new(FixedReach::new());
        let threads: Vec<_> = (0..2)
            .map(|ordinal| {
                let kept = kept.clone();
                loom::thread::spawn(move || {
                    check(&kept, truth, ordinal);
                    check(&kept, truth, 1 - ordinal);
                })
            })
            .collect();
        check(&kept, truth, 2);
        for thread in threads {
            thread.join().unwrap();
        }
        for ordinal in 0..3 {
            check(&kept, truth, ordinal);
        }
    });
}

#[test]
fn a_kept_answer_is_only_ever_true_for_memory_of_one_device() {
    race(Some(&[0]));
}

#[test]
fn a_kept_answer_is_only_ever_true_for_memory_every_device_reaches() {
    race(Some(&[0, 1, 2]));
}

#[test]
fn a_kept_answer_is_only_ever_true_for_memory_no_device_reaches_fixed() {
    race(None);
}
