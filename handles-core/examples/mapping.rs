//! A memfd and a shared mapping of it, as two resources: the mapping owns the file, so the
//! file is closed only after the mapping is unmapped, whichever handle the program drops first.
//!
//! Run with `cargo run -p handles-core --example mapping`. Linux only (memfd_create).

use std::ffi::c_void;
use std::io;

use handles_core::ResourceHandle;

/// An anonymous in-memory file.
#[derive(ResourceHandle)]
#[handle(raw = i32, accessor = as_fd, delete = close_memfd)]
pub struct MemFd {
    /// The name given to memfd_create, shown in /proc/self/fd.
    name: String,
    /// The file's size in bytes.
    size: usize,
}
// SAFETY: descriptors and mappings may be used and released from any thread.
unsafe impl handles_core::ThreadSafe for MemFd {}

fn close_memfd(fd: i32, memfd: &MemFd) -> io::Result<()> {
    println!("  delete MemFd {fd} ({})", memfd.name);
    // SAFETY: the handle owns `fd`, and the runtime calls the deleter exactly once.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A shared mapping of a memfd; keeps the file open while mapped.
#[derive(ResourceHandle)]
#[handle(raw = *mut c_void, accessor = as_ptr, delete = unmap)]
pub struct Mapping {
    #[owner]
    file: MemFdHandle,
    len: usize,
}
// SAFETY: descriptors and mappings may be used and released from any thread.
unsafe impl handles_core::ThreadSafe for Mapping {}

fn unmap(ptr: *mut c_void, mapping: &Mapping) -> io::Result<()> {
    // The owner is still alive here: the deleter runs before the record's fields drop.
    println!(
        "  delete Mapping {ptr:p} (file {} still open)",
        mapping.file.as_fd()
    );
    // SAFETY: `ptr` and `len` are exactly what mmap returned and was asked for.
    if unsafe { libc::munmap(ptr, mapping.len) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl MemFdHandle {
    /// Creates a memfd of `size` bytes.
    pub fn create(name: &str, size: usize) -> io::Result<Self> {
        let c_name = std::ffi::CString::new(name).map_err(io::Error::other)?;
        // SAFETY: `c_name` is a valid C string.
        let fd = unsafe { libc::memfd_create(c_name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let record = MemFd {
            name: name.to_owned(),
            size,
        };
        // SAFETY: `fd` is a fresh descriptor that nothing else owns; `close_memfd` closes it.
        let handle = unsafe { MemFdHandle::from_raw(fd, record) };
        let len = libc::off_t::try_from(size).map_err(io::Error::other)?;
        // SAFETY: `fd` is a valid descriptor owned by `handle`.
        if unsafe { libc::ftruncate(fd, len) } != 0 {
            return Err(io::Error::last_os_error()); // `handle` closes the fd
        }
        println!("  create MemFd {fd} ({name}, {size} bytes)");
        Ok(handle)
    }
}

impl MappingHandle {
    /// Maps the whole file, shared and writable.
    pub fn map(file: &MemFdHandle) -> io::Result<Self> {
        let len = *file.size();
        // SAFETY: a fresh shared mapping of a valid descriptor; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        println!("  create Mapping {ptr:p} of file {}", file.as_fd());
        let record = Mapping {
            file: file.clone(),
            len,
        };
        // SAFETY: `ptr` is a fresh mapping of `len` bytes that nothing else will unmap.
        Ok(unsafe { MappingHandle::from_raw(ptr, record) })
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.as_ptr().cast::<u8>(), *self.len()) }
    }
}

fn main() -> io::Result<()> {
    println!("creating:");
    let file = MemFdHandle::create("handles-example", 4096)?;
    let mapping = MappingHandle::map(&file)?;
    let message = b"written through the file descriptor";
    // SAFETY: writing a byte buffer to a valid descriptor.
    let written = unsafe { libc::pwrite(file.as_fd(), message.as_ptr().cast(), message.len(), 0) };
    assert_eq!(written, message.len() as isize);
    println!(
        "reading through the mapping: {:?}",
        std::str::from_utf8(&mapping.bytes()[..message.len()]).map_err(io::Error::other)?
    );
    println!("{mapping:?}\n{file:?}");

    println!("dropping the file handle first:");
    drop(file);
    println!("  (nothing deleted: the mapping still owns the file)");
    println!("dropping the mapping:");
    drop(mapping);
    Ok(())
}
