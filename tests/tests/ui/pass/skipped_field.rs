// `#[handle(skip)]`: no getter for private state, so the author's method may take its name.
use std::sync::atomic::{AtomicBool, Ordering};

use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u64)]
struct Comm {
    #[handle(skip)]
    failed: AtomicBool,
}

impl CommHandle {
    fn failed(&self) -> bool {
        self.record().failed.load(Ordering::Relaxed)
    }
}

fn main() {
    // SAFETY: a stand-in value; nothing is deleted.
    let comm = unsafe {
        CommHandle::from_raw_borrowed(1, Comm { failed: AtomicBool::new(true) })
    };
    assert!(comm.failed());
}
