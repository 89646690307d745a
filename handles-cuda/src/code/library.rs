//! Libraries of device code (`CUlibrary`): PTX, cubin or fatbin images loaded once for every
//! context (`cuLibraryLoadData` is context-independent), and unloaded when the last handle, and
//! so the last kernel handle, drops.
//!
//! **Unloading after the work that runs its code.** A launch returns as soon as the kernel is
//! queued; unloading the library while that kernel runs would pull its code out from under it.
//! Each launch therefore notes its context in the library (one relaxed load when it is the same
//! context as last time), and the deleter synchronises every noted context before
//! `cuLibraryUnload`. If a context cannot be synchronised, the library is leaked and the
//! failure reported: the only sound answer to work that may still run.
//!
//! **At process exit** a library in a `static` is never dropped, and one in a thread-local of
//! the main thread is dropped while the driver is still up; after the driver shut down, the
//! unload returns `CUDA_ERROR_DEINITIALIZED`, which is not reported (the driver already
//! released everything). `tests/gpu_process.rs` checks both in a child process.

use std::ffi::{CString, c_void};
use std::path::Path;

use cudarc::driver::sys::{CUcontext, CUlibrary};
use handles_core::ResourceHandle;

use crate::code::image::{checked_image, image_entries, ptx_entries};
use crate::code::program::ProgramHandle;
use crate::driver::call::{deleter_status, driver, out};
use crate::driver::load::{ensure_loaded, probed};
use crate::error::{Error, Result};
use crate::exec::context::ContextHandle;
use crate::exec::device::Device;
use crate::exec::stream::StreamHandle;
use crate::order::contexts_used::ContextsUsed;

/// A loaded library of device code.
///
/// Ownership: [`LibraryHandle::load_data`], [`LibraryHandle::load_ptx`] and
/// [`LibraryHandle::load_file`] own the library and unload it when the last clone drops, after
/// synchronising every context its kernels were launched in through this crate. Keeps alive:
/// the contexts its kernels were launched in (so that the unload can wait for them). Kernel
/// handles keep their library alive.
#[derive(ResourceHandle)]
#[handle(raw = CUlibrary, accessor = as_cu, delete = unload_library)]
pub struct Library {
    launched_in: ContextsUsed,
    /// The kernels the image defines and their parameter counts, where the image says (PTX, a
    /// cubin, or a fatbin with an uncompressed entry: `image_entries`).
    entries: Option<Vec<(String, usize)>>,
}
// SAFETY: the CUDA driver API lets libraries be used and unloaded from any thread.
unsafe impl handles_core::ThreadSafe for Library {}

impl Library {
    /// A library's record before any of its kernels ran: the record of a library this
    /// program does not own (for `from_raw_borrowed`), and of each library it loads.
    pub fn reference() -> Library {
        Library {
            launched_in: ContextsUsed::new(),
            entries: None,
        }
    }

    /// The number of parameters of kernel `name`, where the library's image says.
    pub(crate) fn param_count(&self, name: &str) -> Option<usize> {
        let entries = self.entries.as_ref()?;
        entries
            .iter()
            .find(|(entry, _)| entry == name)
            .map(|&(_, count)| count)
    }

    /// The names of the library's kernels, where its image says; empty otherwise.
    pub(crate) fn kernel_names(&self) -> Vec<String> {
        self.entries
            .iter()
            .flatten()
            .map(|(name, _)| name.clone())
            .collect()
    }
}

fn unload_library(raw: CUlibrary, library: &Library) -> Result<()> {
    let sendable = SendLibrary(raw);
    library
        .launched_in
        .release_after_all("Library", raw as isize, move |waited| {
            // A failed wait leaves the library loaded (leaked) and returns the error.
            waited?;
            // The whole wrapper is moved in (a field alone would be captured otherwise).
            let sendable = sendable;
            let raw = sendable.0;
            // SAFETY: the handle owned `raw` and is gone; this release runs once; every
            // context that ran its kernels through this crate has finished all its work.
            deleter_status(unsafe { driver!(cuLibraryUnload(raw)) })
        })
}

/// A library handle that may cross threads, for an unload run on the disposal thread.
struct SendLibrary(CUlibrary);
// SAFETY: a `CUlibrary` is an opaque driver handle, usable (and unloadable) from any thread.
unsafe impl Send for SendLibrary {}

impl LibraryHandle {
    /// Loads a library from an image in memory: PTX text, a cubin (ELF) or a fatbin. The
    /// image is checked first: a binary image whose headers claim more bytes than `image` has,
    /// or an empty one, is an [`Error::BadImage`], never a read past the slice; PTX
    /// without a terminating NUL gets one.
    pub fn load_data(image: &[u8]) -> Result<Self> {
        Self::load_with_entries(image, None)
    }

    /// [`Self::load_data`], with the kernels and parameter counts of the PTX the image was
    /// compiled from where it is not PTX itself (a cubin NVRTC compiled from the same source).
    fn load_with_entries(image: &[u8], entries: Option<Vec<(String, usize)>>) -> Result<Self> {
        ensure_loaded()?;
        let image = checked_image(image)?;
        let entries = image_entries(&image).or(entries);
        let raw = out(|raw| {
            // SAFETY: `image` is a complete image the driver reads within its bounds (checked
            // above); no options are passed; `raw` is a valid out-pointer.
            unsafe {
                driver!(cuLibraryLoadData(
                    raw,
                    image.as_ptr().cast::<c_void>(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                ))
            }
        })?;
        Ok(Self::owning(raw, entries))
    }

    /// Compiles CUDA C++ `source` with NVRTC for `device` and loads it: one call for
    /// [`ProgramHandle::new`], [`ProgramHandle::compile_for`], [`ProgramHandle::ptx`] and
    /// [`Self::load_data`]. Kernels keep their C++ names only when declared `extern "C"`. A
    /// failed compilation is an [`Error::Nvrtc`] with the compiler's log. A driver older than
    /// the NVRTC refuses its PTX (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`); the source is then
    /// compiled again for the device's real architecture (`sm_XY`, machine code the driver
    /// loads without compiling) and that is loaded instead.
    pub fn from_cuda_source(source: &str, device: &Device) -> Result<Self> {
        let program = ProgramHandle::new(source, "source.cu")?;
        let option = ProgramHandle::gpu_architecture(device)?;
        program.compile(&[&option])?;
        let ptx = program.ptx()?;
        match Self::load_data(&ptx) {
            Err(error)
                if error.code()
                    == Some(cudarc::driver::sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION) =>
            {
                program.compile(&[&option.replace("compute_", "sm_")])?;
                Self::load_with_entries(&program.cubin()?, ptx_entries(&ptx))
            }
            loaded => loaded,
        }
    }

    /// Loads a library from PTX source text.
    pub fn load_ptx(ptx: &str) -> Result<Self> {
        Self::load_data(ptx.as_bytes())
    }

    /// Loads a library from a file holding PTX, a cubin or a fatbin
    /// (`cuLibraryLoadFromFile`).
    pub fn load_file(path: impl AsRef<Path>) -> Result<Self> {
        use std::os::unix::ffi::OsStrExt;
        ensure_loaded()?;
        let path = path.as_ref();
        let name = CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::InteriorNul {
            what: format!("path {path:?}"),
        })?;
        let entries = file_entries(path);
        let raw = out(|raw| {
            // SAFETY: `name` is a NUL-terminated path; no options; `raw` is a valid out-pointer.
            unsafe {
                driver!(cuLibraryLoadFromFile(
                    raw,
                    name.as_ptr(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                ))
            }
        })?;
        Ok(Self::owning(raw, entries))
    }

    fn owning(raw: CUlibrary, entries: Option<Vec<(String, usize)>>) -> Self {
        let record = Library {
            entries,
            ..Library::reference()
        };
        // SAFETY: a freshly loaded library owned by nobody else; `unload_library` unloads it
        // once, after the work its kernels were launched for.
        unsafe { LibraryHandle::from_raw(raw, record) }
    }

    /// The record of a library this program does not own: [`Library::reference`].
    #[deprecated(note = "use `Library::reference`, the form every record type has")]
    pub fn reference_record() -> Library {
        Library::reference()
    }

    /// Notes that one of this library's kernels was launched in `context`, so that the unload
    /// waits for it.
    #[inline]
    pub(crate) fn note_launch(
        &self,
        context: CUcontext,
        owning: impl FnOnce() -> Result<ContextHandle>,
    ) -> Result<()> {
        self.record().launched_in.note(context, owning)
    }

    /// Notes a launch queued on `stream`, in the stream's context (see `ContextsUsed`).
    pub(crate) fn note_stream_launch(&self, stream: &StreamHandle) -> Result<()> {
        self.record().launched_in.note_stream(stream)
    }

    /// The number of kernels the library holds (`cuLibraryGetKernelCount`).
    pub fn kernel_count(&self) -> Result<usize> {
        let mut count = 0u32;
        // SAFETY: the library is alive while `self` is; `count` is a valid out-pointer.
        unsafe { probed!(cuLibraryGetKernelCount(&mut count, self.as_cu())) }?;
        Ok(count as usize)
    }
}

/// The entries of the image in the file at `path` ([`image_entries`]); `None` for a file that
/// cannot be read (the driver then reports why it cannot load it).
fn file_entries(path: &Path) -> Option<Vec<(String, usize)>> {
    image_entries(&std::fs::read(path).ok()?)
}

/// A kernel name as the driver takes it.
pub(crate) fn kernel_name(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::InteriorNul {
        what: format!("kernel name {name:?}"),
    })
}
