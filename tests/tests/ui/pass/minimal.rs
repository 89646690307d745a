use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32)]
struct Token;

fn main() {
    // SAFETY: a plain number stands for the resource; nothing is deleted.
    let token = unsafe { TokenHandle::from_raw_borrowed(7, Token) };
    assert_eq!(token.as_raw(), 7);
    assert_eq!(token.as_intptr(), 7);
    assert!(!token.is_owning());
}
