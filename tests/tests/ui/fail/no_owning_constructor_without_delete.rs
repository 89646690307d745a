use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32)]
struct Thing {}

fn main() {
    // SAFETY: not reached; this must not compile.
    let _ = unsafe { ThingHandle::from_raw(3, Thing {}) };
}
