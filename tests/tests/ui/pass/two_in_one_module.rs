use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32)]
struct First {}

#[derive(ResourceHandle)]
#[handle(raw = u32)]
struct Second {
    #[owner]
    first: FirstHandle,
}

fn main() {
    // SAFETY: stand-in values; nothing is deleted.
    let first = unsafe { FirstHandle::from_raw_borrowed(1, First {}) };
    let second = unsafe { SecondHandle::from_raw_borrowed(2, Second { first }) };
    assert_eq!(second.first().as_raw(), 1);
}
