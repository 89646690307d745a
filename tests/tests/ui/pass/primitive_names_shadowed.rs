// User types named like primitives must not break the generated code.
#![allow(non_camel_case_types, dead_code)]

use handles_core::ResourceHandle;

struct bool;
struct usize;
struct str;
struct u32;

#[derive(ResourceHandle)]
#[handle(raw = ::core::primitive::u32, registry)]
struct Shadowed {
    #[handle(copy)]
    size: ::core::primitive::usize,
    flag: bool,
}

// SAFETY: a plain number; nothing is done with it from any thread.
unsafe impl handles_core::ThreadSafe for Shadowed {}

fn main() {
    // SAFETY: a stand-in value; a borrowed handle deletes nothing.
    let handle = unsafe { ShadowedHandle::from_raw_borrowed(1, Shadowed { size: 4, flag: bool }) };
    let size: ::core::primitive::usize = handle.size();
    assert_eq!(size, 4);
    assert!(handle == handle.clone());
    let _: Option<::core::primitive::usize> = ShadowedHandle::live_count();
    assert!(ShadowedHandle::lookup(1).is_none());
}
