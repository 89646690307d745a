//! CPU benchmarks of the runtime on a trivial resource, each beside its `Arc`/`Box` baseline:
//! create+drop by ownership kind, clone+drop, weak upgrade, cache hit and miss, registry
//! lookup, contended clone+drop from two threads, and the cost per operation with 1 to 1M live
//! handles of one type. Run with `cargo bench -p handles-core --bench handles`.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use handles_core::{CacheSlot, ResourceHandle, WeakCache};

static NEXT: AtomicU64 = AtomicU64::new(1);

fn fresh() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn forget(_: u64, _: &Plain) -> Result<(), std::io::Error> {
    Ok(())
}

/// A resource whose deleter does nothing, so only the handle's own cost is measured.
#[derive(ResourceHandle)]
#[handle(raw = u64, delete = forget)]
struct Plain {
    tag: u32,
}
// SAFETY: the raw value is plain data that any thread may use and delete.
unsafe impl handles_core::ThreadSafe for Plain {}

fn forget_registered(_: u64, _: &Registered) -> Result<(), std::io::Error> {
    Ok(())
}

/// The same, registered in its type's registry.
#[derive(ResourceHandle)]
#[handle(raw = u64, delete = forget_registered, registry)]
struct Registered {}
// SAFETY: the raw value is plain data that any thread may use and delete.
unsafe impl handles_core::ThreadSafe for Registered {}

fn forget_cached(_: u64, _: &Cached) -> Result<(), std::io::Error> {
    Ok(())
}

/// The same, created through a keyed cache.
#[derive(ResourceHandle)]
#[handle(raw = u64, delete = forget_cached)]
struct Cached {
    slot: Option<CacheSlot<u64, CachedHandle>>,
}
// SAFETY: the raw value is plain data that any thread may use and delete.
unsafe impl handles_core::ThreadSafe for Cached {}

static CACHE: WeakCache<u64, CachedHandle> = WeakCache::new();

fn owned() -> PlainHandle {
    // SAFETY: a fresh id; the deleter does nothing.
    unsafe { PlainHandle::from_raw(fresh(), Plain { tag: 1 }) }
}

fn borrowed() -> PlainHandle {
    // SAFETY: a stand-in value that is never deleted.
    unsafe { PlainHandle::from_raw_borrowed(7, Plain { tag: 1 }) }
}

fn with_owner() -> PlainHandle {
    // SAFETY: a stand-in value that is never deleted.
    unsafe { PlainHandle::from_raw_with_owner(7, Plain { tag: 1 }, 5u8) }
}

fn registered() -> RegisteredHandle {
    // SAFETY: a fresh id; the deleter does nothing.
    unsafe { RegisteredHandle::from_raw(fresh(), Registered {}) }
}

fn cached(key: u64) -> CachedHandle {
    CACHE
        .get_or_try_insert_with(key, |slot| {
            // SAFETY: a fresh id; the deleter does nothing.
            Ok::<_, ()>(unsafe { CachedHandle::from_raw(fresh(), Cached { slot: Some(slot) }) })
        })
        .unwrap()
}

fn create_drop(c: &mut Criterion) {
    let mut group = c.benchmark_group("create+drop");
    group.bench_function("Box::new baseline", |b| {
        b.iter(|| drop(black_box(Box::new([0u64; 3]))))
    });
    group.bench_function("Arc::new baseline", |b| {
        b.iter(|| drop(black_box(Arc::new([0u64; 3]))))
    });
    group.bench_function("owned handle", |b| b.iter(|| drop(black_box(owned()))));
    group.bench_function("borrowed handle", |b| {
        b.iter(|| drop(black_box(borrowed())))
    });
    group.bench_function("with-owner handle", |b| {
        b.iter(|| drop(black_box(with_owner())))
    });
    group.bench_function("owned registered handle", |b| {
        b.iter(|| drop(black_box(registered())))
    });
    group.finish();
}

fn clone_drop(c: &mut Criterion) {
    let mut group = c.benchmark_group("clone+drop");
    let arc = Arc::new(1u64);
    group.bench_function("Arc baseline", |b| b.iter(|| drop(black_box(arc.clone()))));
    let handle = owned();
    group.bench_function("handle", |b| b.iter(|| drop(black_box(handle.clone()))));
    group.finish();

    let mut group = c.benchmark_group("weak upgrade+drop");
    let weak_arc = Arc::downgrade(&arc);
    group.bench_function("Arc Weak baseline", |b| {
        b.iter(|| drop(black_box(weak_arc.upgrade())))
    });
    let weak = handle.downgrade();
    group.bench_function("handle weak", |b| {
        b.iter(|| drop(black_box(weak.upgrade())))
    });
    group.finish();

    let mut group = c.benchmark_group("raw accessor");
    let boxed = Box::new(42u64);
    group.bench_function("Box field load baseline", |b| {
        b.iter(|| black_box(*black_box(&boxed).as_ref()))
    });
    group.bench_function("handle as_raw", |b| {
        b.iter(|| black_box(black_box(&handle).as_raw()))
    });
    group.finish();
}

fn cache_and_registry(c: &mut Criterion) {
    let mut group = c.benchmark_group("cache");
    // What one would write by hand: a locked map of `Weak`s, looked up and upgraded.
    let arc = Arc::new(1u64);
    let map = std::sync::Mutex::new(std::collections::HashMap::from([(
        1u64,
        Arc::downgrade(&arc),
    )]));
    group.bench_function("Mutex<HashMap<_, Weak>> hit baseline", |b| {
        b.iter(|| {
            drop(black_box(
                map.lock().unwrap().get(&1).and_then(|weak| weak.upgrade()),
            ))
        })
    });
    let kept = cached(1);
    group.bench_function("hit", |b| b.iter(|| drop(black_box(cached(1)))));
    group.bench_function("miss (create, then delete on drop)", |b| {
        b.iter(|| drop(black_box(cached(fresh() + (1 << 40)))))
    });
    drop(kept);
    group.finish();

    let mut group = c.benchmark_group("registry");
    group.bench_function("Mutex<HashMap<_, Weak>> hit baseline", |b| {
        b.iter(|| {
            drop(black_box(
                map.lock().unwrap().get(&1).and_then(|weak| weak.upgrade()),
            ))
        })
    });
    let handle = registered();
    let raw = handle.as_raw();
    group.bench_function("lookup hit", |b| {
        b.iter(|| drop(black_box(RegisteredHandle::lookup(black_box(raw)))))
    });
    group.bench_function("lookup miss", |b| {
        b.iter(|| black_box(RegisteredHandle::lookup(black_box(u64::MAX))))
    });
    group.finish();
}

/// Clone+drop of one shared handle from two threads at once, beside the same for an `Arc`.
fn contended(c: &mut Criterion) {
    fn two_threads<T: Clone + Send + Sync>(value: &T, iterations: u64) -> Duration {
        let start = Instant::now();
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    for _ in 0..iterations {
                        drop(black_box(value.clone()));
                    }
                });
            }
        });
        start.elapsed()
    }
    let mut group = c.benchmark_group("contended clone+drop, 2 threads");
    let arc = Arc::new(1u64);
    group.bench_function("Arc baseline", |b| b.iter_custom(|n| two_threads(&arc, n)));
    let handle = owned();
    group.bench_function("handle", |b| b.iter_custom(|n| two_threads(&handle, n)));
    group.finish();
}

/// Cost per operation with 1, 100, 10k and 1M live handles of one type: it must not grow.
fn scaling(c: &mut Criterion) {
    let mut group = c.benchmark_group("scaling");
    for live in [1usize, 100, 10_000, 1_000_000] {
        let registered_live: Vec<_> = (0..live).map(|_| registered()).collect();
        let cached_live: Vec<_> = (0..live as u64)
            .map(|key| cached(key + (1 << 50)))
            .collect();
        let probe = registered_live[live / 2].as_raw();
        group.bench_with_input(
            BenchmarkId::new("registry lookup", live),
            &probe,
            |b, raw| b.iter(|| drop(black_box(RegisteredHandle::lookup(*raw)))),
        );
        group.bench_with_input(
            BenchmarkId::new("registered create+drop", live),
            &live,
            |b, _| b.iter(|| drop(black_box(registered()))),
        );
        let key = (live as u64 / 2) + (1 << 50);
        group.bench_with_input(BenchmarkId::new("cache hit", live), &key, |b, key| {
            b.iter(|| drop(black_box(cached(*key))))
        });
        group.bench_with_input(
            BenchmarkId::new("owned create+drop", live),
            &live,
            |b, _| b.iter(|| drop(black_box(owned()))),
        );
        drop((registered_live, cached_live));
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = create_drop, clone_drop, cache_and_registry, contended, scaling
}
criterion_main!(benches);
