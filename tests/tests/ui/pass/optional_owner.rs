use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u64)]
struct Context {}

#[derive(ResourceHandle)]
#[handle(raw = u64)]
struct Stream {
    #[owner]
    context: Option<ContextHandle>,
}

fn main() {
    // SAFETY: stand-in values; nothing is deleted.
    let stream = unsafe { StreamHandle::from_raw_borrowed(1, Stream { context: None }) };
    assert!(stream.context().is_none());
}
