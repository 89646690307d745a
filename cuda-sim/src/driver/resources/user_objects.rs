//! User objects (`cuUserObjectCreate`): reference-counted destructor callbacks whose
//! references the program, graphs and executable graphs hold. When the count reaches zero the
//! destructor is queued and called after the simulator's lock is released, at the end of the
//! driver call that dropped the last reference (the driver calls it from an internal thread,
//! later; what matters to a program is that it is not called under the driver's lock).
//!
//! The driver forbids CUDA calls from a destructor. A destructor runs with a thread-local flag
//! set, and any driver call made meanwhile is a `call-from-destructor` violation and fails
//! with `CUDA_ERROR_NOT_PERMITTED`.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::base::errors::INVALID_VALUE;
use crate::base::types::{CuResult, Raw};
use crate::resources::work::HostCall;
use crate::{Kind, Sim};

/// `CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`: the only flag, and required.
pub const NO_DESTRUCTOR_SYNC: u32 = 1;
/// `CU_GRAPH_USER_OBJECT_MOVE`: the graph takes over the caller's references.
pub const GRAPH_USER_OBJECT_MOVE: u32 = 1;

/// A user object.
#[derive(Debug)]
pub struct UserObject {
    pub raw: Raw,
    /// All references: the program's, and those graphs and execs hold.
    pub refs: u64,
    pub destroy: HostCall,
}

/// Destructors due, called after the lock is released.
static PENDING: Mutex<Vec<HostCall>> = Mutex::new(Vec::new());
/// Whether `PENDING` may hold destructors: every driver call checks it, and only takes the
/// queue's lock when it is set.
static DUE: AtomicBool = AtomicBool::new(false);

thread_local! {
    static IN_DESTRUCTOR: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is running a user object's destructor.
pub fn in_destructor() -> bool {
    IN_DESTRUCTOR.try_with(Cell::get).unwrap_or(false)
}

/// Calls the destructors that became due (the caller holds no lock of the simulator).
pub fn run_pending() {
    while DUE.swap(false, Ordering::AcqRel) {
        let due = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|p| p.into_inner()));
        for (destroy, data) in due {
            let _ = IN_DESTRUCTOR.try_with(|flag| flag.set(true));
            // SAFETY: the program's destructor with the program's pointer, as registered by
            // `cuUserObjectCreate`; called once, outside the simulator's lock.
            unsafe { destroy(data as *mut c_void) };
            let _ = IN_DESTRUCTOR.try_with(|flag| flag.set(false));
        }
    }
}

impl Sim {
    /// A live user object, or the error (and violation) for a destroyed one.
    pub fn user_object(&mut self, raw: Raw) -> Result<&mut UserObject, CuResult> {
        if !self.user_objects.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::UserObject, false));
        }
        Ok(self.user_objects.get_mut(&raw).expect("checked"))
    }

    pub fn create_user_object(
        &mut self,
        destroy: HostCall,
        refs: u32,
        flags: u32,
    ) -> Result<Raw, CuResult> {
        if flags != NO_DESTRUCTOR_SYNC || refs == 0 {
            return Err(INVALID_VALUE);
        }
        let raw = self.new_raw(Kind::UserObject);
        self.user_objects.insert(
            raw,
            UserObject {
                raw,
                refs: u64::from(refs),
                destroy,
            },
        );
        Ok(raw)
    }

    pub fn retain_user_object(&mut self, raw: Raw, count: u32) -> Result<(), CuResult> {
        if count == 0 {
            return Err(INVALID_VALUE);
        }
        self.user_object(raw)?.refs += u64::from(count);
        Ok(())
    }

    /// Drops `count` references; the last one queues the destructor. Releasing more than are
    /// held is a double destroy.
    pub fn release_user_object(&mut self, raw: Raw, count: u32) -> Result<(), CuResult> {
        if count == 0 {
            return Err(INVALID_VALUE);
        }
        if !self.user_objects.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::UserObject, true));
        }
        let object = &self.user_objects[&raw];
        if object.refs < u64::from(count) {
            let message = format!(
                "user object {raw:#x} released {count} times with {} references left",
                object.refs
            );
            self.checker.violation("double-destroy", message);
            return Err(INVALID_VALUE);
        }
        self.unreference(raw, count);
        Ok(())
    }

    fn unreference(&mut self, raw: Raw, count: u32) {
        let Some(object) = self.user_objects.get_mut(&raw) else {
            return;
        };
        object.refs = object.refs.saturating_sub(u64::from(count));
        if object.refs == 0 {
            let object = self.user_objects.remove(&raw).expect("present");
            self.bury(raw, Kind::UserObject);
            let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
            pending.push(object.destroy);
            DUE.store(true, Ordering::Release);
        }
    }

    /// Drops the references a destroyed graph or exec held.
    pub fn drop_references(&mut self, references: BTreeMap<Raw, u32>) {
        for (object, count) in references {
            self.unreference(object, count);
        }
    }

    /// `cuGraphRetainUserObject`: the graph takes `count` references, new ones or (with
    /// `CU_GRAPH_USER_OBJECT_MOVE`) the caller's.
    pub fn graph_retain_user_object(
        &mut self,
        graph: Raw,
        raw: Raw,
        count: u32,
        flags: u32,
    ) -> Result<(), CuResult> {
        if count == 0 || flags & !GRAPH_USER_OBJECT_MOVE != 0 {
            return Err(INVALID_VALUE);
        }
        self.graph(graph)?;
        let object = self.user_object(raw)?;
        if flags & GRAPH_USER_OBJECT_MOVE == 0 {
            object.refs += u64::from(count);
        }
        *self
            .graphs
            .get_mut(&graph)
            .expect("checked")
            .user_objects
            .entry(raw)
            .or_insert(0) += count;
        Ok(())
    }

    /// `cuGraphReleaseUserObject`: the graph gives back `count` of its references.
    pub fn graph_release_user_object(
        &mut self,
        graph: Raw,
        raw: Raw,
        count: u32,
    ) -> Result<(), CuResult> {
        if count == 0 {
            return Err(INVALID_VALUE);
        }
        let held = self.graph(graph)?.user_objects.get(&raw).copied();
        match held {
            Some(held) if held >= count => {
                let graph = self.graphs.get_mut(&graph).expect("checked");
                if held == count {
                    graph.user_objects.remove(&raw);
                } else {
                    graph.user_objects.insert(raw, held - count);
                }
                self.unreference(raw, count);
                Ok(())
            }
            _ => {
                self.user_object(raw)?;
                Err(INVALID_VALUE)
            }
        }
    }
}
