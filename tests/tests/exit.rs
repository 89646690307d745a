//! Process exit with live handles, on any machine: handles left in a static, in the
//! thread-locals of an exited thread and of the main thread, with a deleter that runs during
//! thread-local destruction. The test binary re-runs itself as the child; the child must exit
//! with status 0, print no report, and run the thread-local deleters it was promised.

use std::cell::RefCell;
use std::sync::OnceLock;

use handles_tests::{LeafHandle, NodeHandle, child};

static KEPT: OnceLock<(NodeHandle, LeafHandle)> = OnceLock::new();

thread_local! {
    static THREAD_KEPT: RefCell<Vec<NodeHandle>> = const { RefCell::new(Vec::new()) };
}

fn leave_handles_behind(how: &str) {
    let root = NodeHandle::create(None);
    let leaf = LeafHandle::create(NodeHandle::create(Some(root.clone())), "static");
    assert!(KEPT.set((root.clone(), leaf)).is_ok());
    let shared = root.clone();
    std::thread::spawn(move || {
        let node = NodeHandle::create(Some(shared));
        THREAD_KEPT.with(|kept| kept.borrow_mut().push(node));
        // The thread exits here; its thread-locals, and so `node`, are destroyed.
    })
    .join()
    .unwrap();
    THREAD_KEPT.with(|kept| kept.borrow_mut().push(NodeHandle::create(Some(root))));
    println!("child: exiting ({how}) with live handles");
    if how == "exit" {
        std::process::exit(0);
    }
}

#[test]
fn process_exit_with_live_handles_is_clean_without_a_gpu() {
    match child::role().as_deref() {
        Some("exit") => return leave_handles_behind("exit"),
        Some("return") => return leave_handles_behind("return"),
        _ => {}
    }
    child::assert_clean_exits("process_exit_with_live_handles_is_clean_without_a_gpu");
}
