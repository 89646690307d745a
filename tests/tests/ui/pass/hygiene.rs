// Shadow the prelude and common names: generated code must not depend on the caller's imports.
#![no_implicit_prelude]

mod inner {
    #[derive(::handles_core::ResourceHandle)]
    #[handle(raw = u32, accessor = id)]
    pub struct Clean {
        pub value: u32,
    }

    #[allow(dead_code)]
    struct Result;
    #[allow(dead_code)]
    struct Option;
    #[allow(dead_code)]
    trait Clone {}
}

fn main() {
    // SAFETY: a stand-in value; nothing is deleted.
    let clean = unsafe { inner::CleanHandle::from_raw_borrowed(4, inner::Clean { value: 9 }) };
    ::std::assert_eq!(clean.id(), 4);
    ::std::assert_eq!(*clean.value(), 9);
}
