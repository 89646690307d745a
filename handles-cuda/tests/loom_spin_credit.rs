//! Model check of the spin credit (`exec/spin_credit.rs`): polls that earn and spend it at
//! once, from three threads, never take it below 0 or above its full amount, and lose no
//! update (each earn and spend counts, saturating at the bounds). Run with
//! `RUSTFLAGS="--cfg handles_cuda_loom" cargo test -p handles-cuda --test loom_spin_credit
//! --release`.
#![cfg(handles_cuda_loom)]

#[path = "../src/exec/spin_credit.rs"]
#[allow(dead_code)]
mod spin_credit;

use loom::sync::Arc;
use spin_credit::{FULL, SpinCredit};

/// Runs `steps` on three threads against a credit of `start`, and returns the credit at the end.
fn run(start: u32, steps: [fn(&SpinCredit); 3]) -> u32 {
    let credit = Arc::new(SpinCredit::new());
    for _ in start..FULL {
        credit.spend();
    }
    let threads: Vec<_> = steps
        .into_iter()
        .map(|step| {
            let credit = Arc::clone(&credit);
            loom::thread::spawn(move || step(&credit))
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    credit.get()
}

#[test]
fn spends_at_the_bottom_stop_at_zero() {
    loom::model(|| {
        let end = run(1, [SpinCredit::spend, SpinCredit::spend, SpinCredit::earn]);
        // The serial orders of two spends and an earn from 1 end at 0 (the earn first or
        // between) or 1 (the earn last, after a spend that found 0).
        assert!(end <= 1, "credit {end}");
    });
}

#[test]
fn earns_at_the_top_stop_at_full() {
    loom::model(|| {
        let end = run(
            FULL - 1,
            [SpinCredit::earn, SpinCredit::earn, SpinCredit::spend],
        );
        assert!((FULL - 1..=FULL).contains(&end), "credit {end}");
    });
}

#[test]
fn no_update_is_lost_between_the_bounds() {
    loom::model(|| {
        let end = run(4, [SpinCredit::earn, SpinCredit::earn, SpinCredit::spend]);
        assert_eq!(end, 5);
    });
}
