//! The registry against a hand-written `Resource` whose `registry()` answers none, registry A
//! or registry B at will, or a different one on every call; zero-sized and over-aligned
//! records; and `close` racing a lookup or a weak upgrade, which raced the lookup's load of
//! the counts while `Last::get_mut` borrowed the whole allocation (a data race under miri's
//! default model, until it borrowed the value alone). Run natively and under miri:
//!
//! `MIRIFLAGS=-Zmiri-strict-provenance cargo +nightly miri test -p handles-core --test registry_switching`

use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use handles_core::{CloseError, DeleteError, Handle, LiveCount, Registry, Resource};

static MODE: AtomicUsize = AtomicUsize::new(1);
static CALLS: AtomicUsize = AtomicUsize::new(0);
static REG_A: Registry<Fickle> = Registry::new();
static REG_B: Registry<Fickle> = Registry::new();
static FICKLE_LIVE: LiveCount = LiveCount::new();
static DELETES: AtomicUsize = AtomicUsize::new(0);

const NONE: usize = 0;
const A: usize = 1;
const B: usize = 2;
const CYCLE: usize = 3;

pub struct Fickle {
    tag: u64,
}

impl Resource for Fickle {
    type Raw = u64;
    const NAME: &'static str = "Fickle";
    fn delete(raw: u64, _: &Self) -> Result<(), DeleteError> {
        if raw < 1000 {
            DELETES.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
    fn live() -> &'static LiveCount {
        &FICKLE_LIVE
    }
    fn registry() -> Option<&'static Registry<Self>> {
        let mode = match MODE.load(Ordering::SeqCst) {
            CYCLE => CALLS.fetch_add(1, Ordering::SeqCst) % 3,
            mode => mode,
        };
        match mode {
            A => Some(&REG_A),
            B => Some(&REG_B),
            _ => None,
        }
    }
}
// SAFETY: plain numbers.
unsafe impl handles_core::ThreadSafe for Fickle {}

static SERIAL: StdMutex<()> = StdMutex::new(());
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}
fn mode(m: usize) {
    MODE.store(m, Ordering::SeqCst);
}
fn owned(raw: u64, tag: u64) -> Handle<Fickle> {
    // SAFETY: made-up raw values, one live owner each; delete only counts.
    unsafe { Handle::from_raw_owned(raw, Fickle { tag }) }
}
fn borrowed(raw: u64) -> Handle<Fickle> {
    // SAFETY: nothing is deleted for a borrowed handle.
    unsafe { Handle::from_raw_borrowed(raw, Fickle { tag: 0 }) }
}
/// Fills this thread's spares of the box's size, so that the next free deallocates.
fn fill_spares() {
    let fillers: Vec<_> = (0..8)
        // SAFETY: as above.
        .map(|i| unsafe { Handle::from_raw_owned_unregistered(1000 + i, Fickle { tag: 0 }) })
        .collect();
    drop(fillers);
}
fn assert_empty() {
    assert_eq!(REG_A.len(), 0, "REG_A has an entry left");
    assert_eq!(REG_B.len(), 0, "REG_B has an entry left");
    for raw in 0..64 {
        assert!(REG_A.lookup(raw).is_none());
        assert!(REG_B.lookup(raw).is_none());
    }
}

/// Two statics over time, and a borrowed lookup that asks the other one (or none).
#[test]
fn two_registries_and_borrowed_lookups_elsewhere() {
    let _s = serial();
    std::thread::spawn(|| {
        mode(A);
        let a = owned(1, 0xA);
        mode(B);
        let b = owned(2, 0xB);
        // raw 1 lives in REG_A; lookups now go to REG_B: a fresh borrowed box, not `a`.
        let x = borrowed(1);
        assert!(!x.ptr_eq(&a) && !x.is_registered() && !x.is_owning());
        mode(NONE);
        let y = borrowed(2);
        assert!(!y.ptr_eq(&b));
        mode(A);
        let z = borrowed(1);
        assert!(z.ptr_eq(&a), "REG_A still finds a");
        fill_spares();
        mode(NONE);
        drop((x, y, z));
        drop(a); // registry() = None: unique_first must be false (a is registered)
        mode(B);
        fill_spares();
        mode(A);
        drop(b); // registered in B, registry() now A
        mode(A);
        assert_empty();
    })
    .join()
    .unwrap();
}

/// `close` returning StillShared, then the registry switching, then a successful close from
/// another registry answer; FFI round trip while the answer differs.
#[test]
fn close_still_shared_and_ffi_across_switches() {
    let _s = serial();
    std::thread::spawn(|| {
        let before = DELETES.load(Ordering::SeqCst);
        mode(B);
        let h = owned(5, 5);
        let clone = h.clone();
        let h = match h.close() {
            Err(CloseError::StillShared(h)) => h,
            _ => panic!("expected StillShared"),
        };
        mode(NONE);
        let ptr = clone.into_ffi();
        mode(A);
        // SAFETY: from `into_ffi` of a `Handle<Fickle>`, taken back once.
        let clone = unsafe { Handle::<Fickle>::from_ffi(ptr) };
        assert!(clone.is_registered());
        drop(clone);
        fill_spares();
        mode(NONE);
        assert!(h.close().is_ok());
        assert_eq!(DELETES.load(Ordering::SeqCst), before + 1);
        mode(A);
        assert_empty();
    })
    .join()
    .unwrap();
}

/// An unregistered owned box while the registry says Some; then dropped while it says None.
#[test]
fn unregistered_owned_box_while_registry_answers() {
    let _s = serial();
    std::thread::spawn(|| {
        mode(A);
        // SAFETY: as above.
        let u = unsafe { Handle::from_raw_owned_unregistered(9, Fickle { tag: 9 }) };
        assert!(!u.is_registered());
        assert!(REG_A.lookup(9).is_none());
        assert!(!borrowed(9).ptr_eq(&u));
        mode(NONE);
        drop(u);
        mode(A);
        assert_empty();
    })
    .join()
    .unwrap();
}

/// `registry()` gives a different answer on every call (None, A, B, ...) while two threads
/// create, look up (both statics, and through `from_raw_borrowed`), clone, close and drop
/// handles of a few raw values. Every box must leave no entry behind, and no lookup may touch
/// a freed box (miri).
#[test]
fn cycling_registry_under_concurrent_lookups() {
    let _s = serial();
    mode(CYCLE);
    let iterations: u64 = if cfg!(miri) { 40 } else { 20_000 };
    let before = DELETES.load(Ordering::SeqCst);
    let created = std::sync::Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..2u64)
        .map(|t| {
            let created = created.clone();
            std::thread::spawn(move || {
                for i in 0..iterations {
                    // Each thread owns its own raw values (one live owner each).
                    let raw = t * 8 + (i % 4);
                    let h = owned(raw, raw);
                    created.fetch_add(1, Ordering::SeqCst);
                    // Look up the other thread's raw values.
                    let other = (1 - t) * 8 + (i % 4);
                    let found: Vec<_> = [REG_A.lookup(other), REG_B.lookup(other)]
                        .into_iter()
                        .flatten()
                        .collect();
                    for f in &found {
                        assert_eq!(f.raw(), other);
                        assert_eq!(f.record().tag, other);
                    }
                    let b = borrowed(other);
                    assert_eq!(b.raw(), other);
                    let c = h.clone();
                    if i % 3 == 0 {
                        drop(c);
                        if let Err(CloseError::StillShared(h)) = h.close() {
                            drop(h);
                        }
                    } else {
                        drop(h);
                        drop(c);
                    }
                    drop(found);
                    drop(b);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    mode(A);
    assert_eq!(
        DELETES.load(Ordering::SeqCst) - before,
        created.load(Ordering::SeqCst)
    );
    assert_empty();
}

// ---------------------------------------------------------------------------------------------
// Layouts: zero-sized and over-aligned records (offset_of on Inner<T> in is_value_at).
// ---------------------------------------------------------------------------------------------

macro_rules! layout_type {
    ($name:ident, $raw:ty, $reg:ident, $live:ident, $rec:ty) => {
        static $reg: Registry<$name> = Registry::new();
        static $live: LiveCount = LiveCount::new();
        pub struct $name(#[allow(dead_code)] $rec);
        impl Resource for $name {
            type Raw = $raw;
            const NAME: &'static str = stringify!($name);
            fn delete(_: $raw, _: &Self) -> Result<(), DeleteError> {
                Ok(())
            }
            fn live() -> &'static LiveCount {
                &$live
            }
            fn registry() -> Option<&'static Registry<Self>> {
                Some(&$reg)
            }
        }
        // SAFETY: plain values.
        unsafe impl handles_core::ThreadSafe for $name {}
    };
}

#[derive(Default)]
pub struct Zst;
#[derive(Default)]
#[repr(align(64))]
pub struct Align64(#[allow(dead_code)] u8);
#[derive(Default)]
#[repr(align(4096))]
pub struct Align4096(#[allow(dead_code)] u8);
#[derive(Default)]
#[repr(align(16))]
pub struct Align16(#[allow(dead_code)] [u8; 3]);

layout_type!(ZstU8, u8, ZST_U8_REG, ZST_U8_LIVE, Zst);
layout_type!(ZstPtr, *const (), ZST_PTR_REG, ZST_PTR_LIVE, Zst);
layout_type!(Al64, u8, AL64_REG, AL64_LIVE, Align64);
layout_type!(Al4096, u16, AL4096_REG, AL4096_LIVE, Align4096);
layout_type!(Al16, i8, AL16_REG, AL16_LIVE, Align16);

fn exercise<R: Resource>(reg: &'static Registry<R>, raws: [R::Raw; 3], rec: fn() -> R) {
    for _round in 0..3 {
        // SAFETY: made-up raw values, one live owner each; delete does nothing.
        let hs: Vec<_> = raws
            .iter()
            .map(|&r| unsafe { Handle::from_raw_owned(r, rec()) })
            .collect();
        assert_eq!(reg.len(), 3);
        for (h, &r) in hs.iter().zip(&raws) {
            let found = reg.lookup(r).expect("registered");
            assert!(found.ptr_eq(h));
        }
        let mut hs = hs.into_iter();
        let first = hs.next().unwrap();
        assert!(first.close().is_ok());
        drop(hs);
        assert_eq!(reg.len(), 0, "{}: an entry was not removed", R::NAME);
        for &r in &raws {
            assert!(reg.lookup(r).is_none());
        }
    }
}

#[test]
fn zero_sized_and_over_aligned_records() {
    exercise(&ZST_U8_REG, [1, 2, 3], || ZstU8(Zst));
    exercise(
        &ZST_PTR_REG,
        [
            std::ptr::without_provenance(8),
            std::ptr::without_provenance(16),
            std::ptr::without_provenance(24),
        ],
        || ZstPtr(Zst),
    );
    exercise(&AL64_REG, [1, 2, 3], || Al64(Align64::default()));
    exercise(&AL4096_REG, [1, 2, 3], || Al4096(Align4096::default()));
    exercise(&AL16_REG, [1, 2, 3], || Al16(Align16::default()));
}

// ---------------------------------------------------------------------------------------------
// `close` (Last::get_mut: `&mut` through `NonNull::as_mut`, the whole allocation) racing a
// lookup that reads the same allocation's counts.
// ---------------------------------------------------------------------------------------------

static SLOW_REG: Registry<Slow> = Registry::new();
static SLOW_LIVE: LiveCount = LiveCount::new();
pub struct Slow;
impl Resource for Slow {
    type Raw = u64;
    const NAME: &'static str = "Slow";
    fn delete(_: u64, _: &Self) -> Result<(), DeleteError> {
        for _ in 0..20 {
            std::thread::yield_now();
        }
        Ok(())
    }
    fn live() -> &'static LiveCount {
        &SLOW_LIVE
    }
    fn registry() -> Option<&'static Registry<Self>> {
        Some(&SLOW_REG)
    }
}
// SAFETY: plain numbers.
unsafe impl handles_core::ThreadSafe for Slow {}

/// Closes `handle` (retrying while a racing upgrade holds it) while another thread runs
/// `upgrade` in a loop and drops what it gets.
fn close_while_upgrading(
    mut handle: Handle<Slow>,
    upgrade: impl Fn() -> Option<Handle<Slow>> + Send + 'static,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let looker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                drop(upgrade());
                std::thread::yield_now();
            }
        })
    };
    loop {
        match handle.close() {
            Ok(()) => break,
            Err(CloseError::StillShared(back)) => handle = back,
            Err(CloseError::Deleter(e)) => panic!("{e}"),
        }
        std::thread::yield_now();
    }
    stop.store(true, Ordering::SeqCst);
    looker.join().unwrap();
}

#[test]
fn close_races_lookup() {
    let rounds = if cfg!(miri) { 6 } else { 2000 };
    for _ in 0..rounds {
        // SAFETY: one live owner of raw 3; delete does nothing to it.
        let handle = unsafe { Handle::from_raw_owned(3u64, Slow) };
        close_while_upgrading(handle, || SLOW_REG.lookup(3));
        assert!(SLOW_REG.is_empty());
    }
}

/// The same race through a `WeakHandle` (no registry involved): `close` against `upgrade`.
#[test]
fn close_races_weak_upgrade() {
    let rounds = if cfg!(miri) { 6 } else { 2000 };
    for _ in 0..rounds {
        // SAFETY: unregistered; delete does nothing.
        let handle = unsafe { Handle::from_raw_owned_unregistered(4u64, Slow) };
        let weak = handle.downgrade();
        close_while_upgrading(handle, move || weak.upgrade());
    }
}
