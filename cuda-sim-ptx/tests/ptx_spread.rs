//! One block spread over several workers (threads without barriers or warp collectives):
//! the same results, printf order and fault reports as with one worker.

mod common;

use common::*;
use cuda_sim_ptx::Fault;

fn one_block(threads: u32, workers: usize) -> Launch {
    Launch {
        workers,
        synccheck: false,
        racecheck: false,
        ..launch1(1, threads)
    }
}

#[test]
fn slow_worker_one_block_on_several_workers() {
    let m = load(&fixture(
        "slow_worker",
        include_str!("../fixtures/slow_worker.ptx"),
    ));
    let mut mem = Mem::new();
    let len = 37usize;
    let (bd, bo) = (mem.alloc(len * 4), mem.alloc(4));
    let x: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
    mem.write(bd, &x);
    let iters = 1003u64;
    let want: f32 = (0..iters).fold(0f32, |a, i| a + x[i as usize % len]);
    for workers in [1, 3, 8] {
        mem.write(bo, &[0f32]);
        let p = Params::default()
            .u64(mem.addr(bd))
            .u64(len as u64)
            .u64(mem.addr(bo))
            .u64(iters);
        let out = go_ok(&m, &mem, &[], "slow_worker", &one_block(1024, workers), &p);
        assert_eq!(mem.read::<f32>(bo)[0], want);
        assert_eq!(out.touched, [(bd, false), (bo, true)]);
    }
}

#[test]
fn lowest_faulting_thread_of_a_spread_block_is_reported() {
    let m = load(&fixture("oob", include_str!("../fixtures/oob.ptx")));
    let mut mem = Mem::new();
    let n = 500usize;
    let b = mem.alloc(n * 4);
    let p = Params::default().u64(mem.addr(b)).i32(n as i32);
    for workers in [1, 2, 5] {
        let (f, out) = go(&m, &mem, &[], "past_end", &one_block(1024, workers), &p).unwrap_err();
        match f {
            Fault::OutOfBounds { block, thread, .. } => {
                assert_eq!((block, thread), ([0, 0, 0], [n as u32, 0, 0]));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(out.touched, [(b, true)]);
        let o: Vec<i32> = mem.read(b);
        assert!(o.iter().enumerate().all(|(i, &v)| v == i as i32));
    }
}

#[test]
fn printf_of_a_spread_block_is_in_thread_order() {
    let m = load(&fixture("printf", include_str!("../fixtures/printf.ptx")));
    let mut mem = Mem::new();
    let (g, _) = mem.globals(&m);
    let p = Params::default().i32(-3).f64(2.5).u64(0);
    let one = go_ok(&m, &mem, &g, "hello", &one_block(200, 1), &p).printf;
    assert_eq!(one.lines().count(), 200);
    for workers in [2, 7] {
        let many = go_ok(&m, &mem, &g, "hello", &one_block(200, workers), &p).printf;
        assert_eq!(many, one);
    }
}
