use std::ffi::c_void;

use handles_core::{Ownership, ResourceHandle};

fn close_file(_: i32, _: &File) -> Result<(), std::io::Error> {
    Ok(())
}

fn unmap(_: *mut c_void, _: &Mapping) -> Result<(), std::io::Error> {
    Ok(())
}

/// A file.
#[derive(ResourceHandle)]
#[handle(raw = i32, accessor = as_fd, delete = close_file, registry)]
pub struct File {
    /// The path it was opened at.
    pub path: String,
}

// SAFETY: descriptors may be used and closed from any thread.
unsafe impl handles_core::ThreadSafe for File {}

/// A mapping of a file; keeps the file open while mapped.
#[derive(ResourceHandle)]
#[handle(
    raw = *mut c_void,
    accessor = as_ptr,
    delete = unmap,
    crate = ::handles_core,
)]
pub struct Mapping {
    #[owner]
    file: FileHandle,
    #[handle(copy)]
    len: usize,
}

// SAFETY: mappings may be used and unmapped from any thread.
unsafe impl handles_core::ThreadSafe for Mapping {}

fn assert_send_sync<T: Send + Sync>() {}

fn main() {
    assert_send_sync::<FileHandle>();
    assert_send_sync::<MappingHandle>();
    assert_send_sync::<MappingWeak>();
    // SAFETY: stand-in values; the deleters do nothing.
    let file = unsafe { FileHandle::from_raw(3, File { path: "/tmp/x".into() }) };
    let mapping = unsafe {
        MappingHandle::from_raw(std::ptr::null_mut(), Mapping { file: file.clone(), len: 4096 })
    };
    assert_eq!(mapping.file().as_fd(), 3);
    assert_eq!(mapping.len(), 4096);
    assert_eq!(mapping.ownership(), Ownership::Owned);
    assert!(FileHandle::lookup(3).is_some());
    let weak: MappingWeak = mapping.downgrade();
    assert!(weak.upgrade().is_some());
    let _boxed: Option<&MappingBox> = None;
    let _ = <MappingHandle as ResourceHandle>::into_handle(mapping);
}
