// A declaration error is reported once. The generated names still exist (as stand-ins that
// silence their uses), so code elsewhere that uses them gets no follow-on errors: neither
// "cannot find type" through `use super::*` (which rustc does not hide by itself), nor method,
// trait or `#[owner]` errors, nor a missing `Resource` impl under the author's thread-safety
// opt-in; and the fallback adds no warnings of its own.
#![deny(missing_docs, warnings)]
//! A crate whose declarations have mistakes.

use handles_core::ResourceHandle;

/// A resource whose `#[handle]` has a typo.
#[derive(ResourceHandle)]
#[handle(raw = u32, acessor = as_id)]
pub struct Thing {
    #[handle(copy)]
    len: u32,
}

// SAFETY: a test value, never used from another thread.
unsafe impl handles_core::ThreadSafe for Thing {}

mod private {
    use handles_core::ResourceHandle;

    #[derive(ResourceHandle)]
    #[handle(raw = u32, registry = yes)]
    pub(crate) struct Inner {}
}

/// Uses the generated types from another module.
pub mod uses {
    use super::private::*;
    use super::*;

    /// Takes every generated type.
    pub fn f(_: ThingHandle, _: ThingBox, _: ThingWeak) {}

    pub(crate) fn g(_: &InnerHandle, _: InnerBox, _: Option<InnerWeak>) {}

    impl ThingHandle {
        /// The author's own method, calling generated ones.
        pub fn id(&self) -> u32 {
            self.as_id() + self.len() + self.downgrade().upgrade().map_or(0, |h| h.as_id())
        }
    }

    /// A valid declaration that owns a handle whose declaration failed.
    #[derive(ResourceHandle)]
    #[handle(raw = u64)]
    pub struct Child {
        #[owner]
        parent: ThingHandle,
    }
}

fn main() {
    let _ = uses::g;
}
