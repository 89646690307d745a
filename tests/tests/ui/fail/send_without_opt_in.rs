use handles_core::ResourceHandle;
use std::ffi::c_void;

fn unmap(_: *mut c_void, _: &Mapping) -> Result<(), std::io::Error> {
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = *mut c_void, accessor = as_ptr, delete = unmap)]
struct Mapping {
    len: usize,
}

fn main() {
    // SAFETY: never dereferenced, and the deleter does nothing.
    let handle = unsafe { MappingHandle::from_raw(std::ptr::null_mut(), Mapping { len: 1 }) };
    std::thread::spawn(move || drop(handle));
}
