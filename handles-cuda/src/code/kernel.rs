//! Kernels (`CUkernel`): entry points of a library, found by name.
//!
//! A kernel has no destroy call of its own: it lives as long as its library, which its handle
//! keeps loaded. Kernels are registered, so a raw `CUkernel` (from a graph node, or another
//! library) maps back to its handle with [`KernelHandle::lookup`]; the driver returns the same
//! raw kernel for the same name every time, so [`KernelHandle::get`] returns the registered
//! handle when there is one instead of registering the raw value twice.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use cudarc::driver::sys::{self, CUfunction_attribute, CUkernel};
use handles_core::ResourceHandle;

use crate::code::library::{LibraryHandle, kernel_name};
use crate::driver::call::{driver, out};
use crate::driver::load::{self, device_count, ensure_loaded, newer, probed};
use crate::error::{Error, Result};
use crate::exec::context::in_current_or_primary;
use crate::sync::lock;

/// A kernel of a loaded library.
///
/// Ownership: [`KernelHandle::get`] returns the canonical handle of the kernel (registered);
/// dropping it deletes nothing, since the driver releases kernels with their library. Keeps
/// alive: its library.
#[derive(ResourceHandle)]
#[handle(raw = CUkernel, accessor = as_cu, delete = release_kernel, registry)]
pub struct Kernel {
    /// The library the kernel belongs to.
    #[owner]
    pub library: LibraryHandle,
    /// The kernel's name, as looked up.
    pub name: String,
    /// The byte size of each parameter, when the driver can say (`cuKernelGetParamInfo`,
    /// CUDA 12.4 and later).
    pub param_sizes: Option<Vec<usize>>,
    /// Per device ordinal, the launch limits read from the driver (0 until first read).
    limits: Box<[Limits]>,
}
// SAFETY: the CUDA driver API lets kernels be used from any thread; they are never destroyed.
unsafe impl handles_core::ThreadSafe for Kernel {}

/// A kernel is released by its library's unload; its handle has nothing to delete.
fn release_kernel(_: CUkernel, _: &Kernel) -> Result<()> {
    Ok(())
}

/// The launch limits of a kernel on one device, cached as they are read (0 = not read yet).
#[derive(Default)]
struct Limits {
    max_threads_per_block: AtomicU32,
    max_dynamic_shared_bytes: AtomicU32,
}

/// The attributes of a kernel that a program tunes or reads (`CUfunction_attribute`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelAttribute {
    /// The largest block (threads) the kernel can be launched with on the device.
    MaxThreadsPerBlock,
    /// Statically allocated shared memory per block, in bytes.
    SharedSizeBytes,
    /// Constant memory the kernel uses, in bytes.
    ConstSizeBytes,
    /// Local memory per thread, in bytes.
    LocalSizeBytes,
    /// Registers per thread.
    NumRegs,
    /// The PTX virtual architecture the kernel was compiled for (e.g. 90).
    PtxVersion,
    /// The binary architecture the kernel was compiled for (e.g. 90).
    BinaryVersion,
    /// The most dynamic shared memory a launch may request, in bytes (settable).
    MaxDynamicSharedSizeBytes,
    /// The preferred shared-memory carve-out, in percent (settable).
    PreferredSharedMemoryCarveout,
}

impl KernelAttribute {
    fn to_raw(self) -> CUfunction_attribute {
        use sys::CUfunction_attribute_enum as A;
        match self {
            KernelAttribute::MaxThreadsPerBlock => A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            KernelAttribute::SharedSizeBytes => A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
            KernelAttribute::ConstSizeBytes => A::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES,
            KernelAttribute::LocalSizeBytes => A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
            KernelAttribute::NumRegs => A::CU_FUNC_ATTRIBUTE_NUM_REGS,
            KernelAttribute::PtxVersion => A::CU_FUNC_ATTRIBUTE_PTX_VERSION,
            KernelAttribute::BinaryVersion => A::CU_FUNC_ATTRIBUTE_BINARY_VERSION,
            KernelAttribute::MaxDynamicSharedSizeBytes => {
                A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            }
            KernelAttribute::PreferredSharedMemoryCarveout => {
                A::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
            }
        }
    }
}

/// Serialises [`KernelHandle::get`]'s lookup-then-register, so that one raw kernel never gets
/// two registered handles.
static REGISTERING: Mutex<()> = Mutex::new(());

impl KernelHandle {
    /// The kernel `name` of `library` (`cuLibraryGetKernel`): the registered handle if one is
    /// alive, else a new one. An unknown name is [`Error::KernelNotFound`], which lists the
    /// library's kernels where its image says (a C++ kernel's name is mangled unless it is
    /// declared `extern "C"`).
    pub fn get(library: &LibraryHandle, name: &str) -> Result<Self> {
        ensure_loaded()?;
        let c_name = kernel_name(name)?;
        let raw = out(|raw| {
            // SAFETY: the library is alive; `c_name` is NUL-terminated; `raw` is an out-pointer.
            unsafe { driver!(cuLibraryGetKernel(raw, library.as_cu(), c_name.as_ptr())) }
        })
        .map_err(|error| match error.code() {
            Some(sys::CUresult::CUDA_ERROR_NOT_FOUND) => Error::KernelNotFound {
                name: name.to_owned(),
                known: library.record().kernel_names(),
            },
            _ => error,
        })?;
        let _registering = lock(&REGISTERING);
        if let Some(known) = Self::lookup(raw) {
            return Ok(known);
        }
        let record = Kernel {
            library: library.clone(),
            name: name.to_owned(),
            param_sizes: in_some_context(|| param_sizes(raw, library.record().param_count(name)))?,
            limits: (0..device_count()?).map(|_| Limits::default()).collect(),
        };
        // SAFETY: a kernel of a library the record keeps loaded; `release_kernel` deletes
        // nothing, as the driver requires (kernels go with their library).
        Ok(unsafe { KernelHandle::from_raw(raw, record) })
    }

    /// Reads an attribute of the kernel on device `ordinal` (`cuKernelGetAttribute`).
    pub fn attribute(&self, attribute: KernelAttribute, ordinal: usize) -> Result<i32> {
        let device = load::device(ordinal)?;
        in_some_context(|| {
            out(|value| {
                // SAFETY: the kernel is alive (its library is loaded) and `device` is valid.
                unsafe {
                    driver!(cuKernelGetAttribute(
                        value,
                        attribute.to_raw(),
                        self.as_cu(),
                        device
                    ))
                }
            })
        })
    }

    /// Sets an attribute of the kernel on device `ordinal` (`cuKernelSetAttribute`); the
    /// settable ones are [`KernelAttribute::MaxDynamicSharedSizeBytes`] and
    /// [`KernelAttribute::PreferredSharedMemoryCarveout`]. Launches check against the new value.
    pub fn set_attribute(
        &self,
        attribute: KernelAttribute,
        value: i32,
        ordinal: usize,
    ) -> Result<()> {
        let device = load::device(ordinal)?;
        if let Some(limits) = self.record().limits.get(ordinal) {
            // Forgotten first, so the next launch reads the driver's value whatever happens
            // below (the driver may round or clamp, and a failed restore after a successful
            // set must not leave a stale limit).
            limits.max_dynamic_shared_bytes.store(0, Ordering::Relaxed);
            limits.max_threads_per_block.store(0, Ordering::Relaxed);
        }
        in_some_context(|| {
            // SAFETY: the kernel is alive (its library is loaded) and `device` is valid.
            unsafe {
                driver!(cuKernelSetAttribute(
                    attribute.to_raw(),
                    value,
                    self.as_cu(),
                    device
                ))
            }
        })
    }

    /// The most threads per block and the most dynamic shared memory a launch of this kernel
    /// may ask for on device `ordinal`, read from the driver once and then cached.
    #[inline]
    pub(crate) fn launch_limits(&self, ordinal: usize) -> Result<(u32, u32)> {
        // Both cached (never 0 once read, but for a shared-memory limit of 0): no call.
        if let Some(limits) = self.record().limits.get(ordinal) {
            let threads = limits.max_threads_per_block.load(Ordering::Relaxed);
            let shared = limits.max_dynamic_shared_bytes.load(Ordering::Relaxed);
            if threads != 0 && shared != 0 {
                return Ok((threads, shared));
            }
        }
        self.launch_limits_read(ordinal)
    }

    /// [`Self::launch_limits`] with a value not cached yet: off the common path.
    #[cold]
    #[inline(never)]
    fn launch_limits_read(&self, ordinal: usize) -> Result<(u32, u32)> {
        let Some(limits) = self.record().limits.get(ordinal) else {
            return Err(Error::NoSuchDevice {
                ordinal,
                count: self.record().limits.len(),
            });
        };
        let threads = cached(&limits.max_threads_per_block, || {
            self.attribute(KernelAttribute::MaxThreadsPerBlock, ordinal)
        })?;
        let shared = cached(&limits.max_dynamic_shared_bytes, || {
            self.attribute(KernelAttribute::MaxDynamicSharedSizeBytes, ordinal)
        })?;
        Ok((threads, shared))
    }
}

/// A cached attribute: the stored value, or the driver's, stored for next time.
#[inline]
fn cached(slot: &AtomicU32, read: impl FnOnce() -> Result<i32>) -> Result<u32> {
    match slot.load(Ordering::Relaxed) {
        0 => {
            // A value of 0 is stored as 0 and read again each time: only the shared-memory
            // limit of a kernel on a device without opt-in shared memory can be 0.
            let value = u32::try_from(read()?).unwrap_or(0);
            slot.store(value, Ordering::Relaxed);
            Ok(value)
        }
        value => Ok(value),
    }
}

/// Runs `call` in the current context (kept alive for the call), or in device 0's primary
/// context if none is current: the driver resolves a kernel in the current context to answer
/// questions about it, even though kernels belong to no context.
fn in_some_context<T>(call: impl FnOnce() -> Result<T>) -> Result<T> {
    in_current_or_primary(|| Ok(0), call)
}

/// The byte size of each parameter of `kernel`, when the driver has `cuKernelGetParamInfo`.
///
/// The number of parameters comes from `cuKernelGetParamCount` (CUDA 13.2) where the driver
/// has it, else from the library's image (`in_image`: the `.param`s of a PTX `.entry`, or a
/// cubin's parameter records, see `code/image.rs`), so that no call fails: a failing call is an
/// error in the user's tools (compute-sanitizer reports each one). Only for an image that says
/// nothing (a fatbin whose every entry is compressed) on an older driver is the list still
/// probed until the driver answers `CUDA_ERROR_INVALID_VALUE` past the last parameter.
fn param_sizes(kernel: CUkernel, in_image: Option<usize>) -> Result<Option<Vec<usize>>> {
    if !newer::cuKernelGetParamInfo.available() {
        return Ok(None);
    }
    let count = match param_count(kernel)? {
        Some(count) => Some(count),
        None => in_image,
    };
    let mut sizes = Vec::new();
    loop {
        if count.is_some_and(|count| sizes.len() >= count) {
            return Ok(Some(sizes));
        }
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: the kernel is alive; both out-pointers are valid. An index past the last
        // parameter is answered with CUDA_ERROR_INVALID_VALUE, which ends the list.
        let status = unsafe {
            probed!(status cuKernelGetParamInfo(kernel, sizes.len(), &mut offset, &mut size))
        }?;
        match status {
            sys::CUresult::CUDA_SUCCESS => sizes.push(size),
            sys::CUresult::CUDA_ERROR_INVALID_VALUE => return Ok(Some(sizes)),
            status => {
                return crate::driver::call::check("cuKernelGetParamInfo", status).map(|()| None);
            }
        }
        if sizes.len() > 4096 {
            // The driver caps a kernel's parameters at 32 KiB; a list this long is not real.
            return Err(Error::DriverAnomaly {
                call: "cuKernelGetParamInfo",
                what: "more than 4096 parameters".into(),
            });
        }
    }
}

/// The number of parameters of `kernel` (`cuKernelGetParamCount`), where the driver has it.
fn param_count(kernel: CUkernel) -> Result<Option<usize>> {
    type ParamCount = unsafe extern "C" fn(CUkernel, *mut usize) -> sys::CUresult;
    // SAFETY: the signature of `cuKernelGetParamCount` (CUDA 13.2).
    let Some(count_of) = (unsafe { newer::cuKernelGetParamCount.function::<ParamCount>() }) else {
        return Ok(None);
    };
    let mut count = 0usize;
    // SAFETY: the kernel is alive; `count` is a valid out-pointer.
    crate::driver::call::check("cuKernelGetParamCount", unsafe {
        count_of(kernel, &mut count)
    })?;
    Ok(Some(count))
}
