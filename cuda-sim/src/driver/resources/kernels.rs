//! Kernels (`CUkernel`, one per PTX entry of a library) and their per-context functions
//! (`CUfunction` from `cuKernelGetFunction`): attributes and parameter layout. Launches run on
//! the PTX interpreter (see `interp`).

use std::collections::HashMap;
use std::ffi::CString;

use cuda_sim_ptx::Entry;

use crate::base::errors::INVALID_VALUE;
use crate::base::types::{CuResult, Raw};
use crate::{Kind, Sim};

pub const MAX_THREADS_PER_BLOCK: i32 = 1024;
/// The dynamic shared memory a kernel may use unless raised (48 KiB, as on every device).
pub const DEFAULT_DYNAMIC_SHARED: i32 = 49152;
/// The opt-in limit of an H200 (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`).
pub const MAX_DYNAMIC_SHARED: i32 = 232_448;

pub const ATTR_MAX_THREADS_PER_BLOCK: u32 = 0;
pub const ATTR_SHARED_SIZE_BYTES: u32 = 1;
pub const ATTR_CONST_SIZE_BYTES: u32 = 2;
pub const ATTR_LOCAL_SIZE_BYTES: u32 = 3;
pub const ATTR_NUM_REGS: u32 = 4;
pub const ATTR_PTX_VERSION: u32 = 5;
pub const ATTR_BINARY_VERSION: u32 = 6;
pub const ATTR_CACHE_MODE_CA: u32 = 7;
pub const ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES: u32 = 8;
pub const ATTR_PREFERRED_SHARED_MEMORY_CARVEOUT: u32 = 9;
pub const ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: u32 = 14;
pub const ATTR_CLUSTER_SCHEDULING_POLICY_PREFERENCE: u32 = 15;

/// The settable attributes of a kernel on one device.
#[derive(Clone, Copy, Debug)]
pub struct Attrs {
    pub max_dynamic_shared: i32,
    pub carveout: i32,
    pub non_portable_cluster: i32,
    pub cluster_policy: i32,
}

impl Default for Attrs {
    fn default() -> Attrs {
        Attrs {
            max_dynamic_shared: DEFAULT_DYNAMIC_SHARED,
            carveout: -1,
            non_portable_cluster: 0,
            cluster_policy: 0,
        }
    }
}

/// A kernel of a loaded library.
#[derive(Debug)]
pub struct Kernel {
    pub raw: Raw,
    pub library: Raw,
    pub name: CString,
    /// Its index among the module's entries.
    pub index: usize,
    pub entry: Entry,
    /// Bytes of static shared, constant and local (per thread) memory it uses.
    pub sizes: [u64; 3],
    /// Attributes per device (`cuKernelSetAttribute` names the device; `cuFuncSetAttribute`
    /// the function's context's device).
    pub attrs: Vec<Attrs>,
    /// Its function in each context where one was asked for, by context.
    pub functions: HashMap<Raw, Raw>,
}

impl Kernel {
    pub fn new(
        raw: Raw,
        library: Raw,
        name: CString,
        (index, entry, sizes): (usize, Entry, [u64; 3]),
        devices: usize,
    ) -> Kernel {
        Kernel {
            raw,
            library,
            name,
            index,
            entry,
            sizes,
            attrs: vec![Attrs::default(); devices],
            functions: HashMap::new(),
        }
    }
}

/// A kernel loaded into a context (`CUfunction`).
#[derive(Debug)]
pub struct Function {
    pub raw: Raw,
    pub kernel: Raw,
    pub context: Raw,
}

/// What a launch or an attribute call names: a kernel, possibly through a function.
#[derive(Clone, Copy, Debug)]
pub struct Callee {
    pub kernel: Raw,
    /// The function's context when the handle was a `CUfunction`.
    pub context: Option<Raw>,
}

impl Sim {
    /// A live kernel, or the error (and violation) for one whose library was unloaded.
    pub fn kernel(&mut self, raw: Raw) -> Result<&mut Kernel, CuResult> {
        if !self.kernels.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::Kernel, false));
        }
        Ok(self.kernels.get_mut(&raw).expect("checked"))
    }

    /// Resolves a `CUfunction` argument, which may also be a `CUkernel` (the driver accepts
    /// either in launches and attribute calls).
    pub fn callee(&mut self, raw: Raw) -> Result<Callee, CuResult> {
        if self.kernels.contains_key(&raw) {
            return Ok(Callee {
                kernel: raw,
                context: None,
            });
        }
        if let Some(function) = self.functions.get(&raw) {
            return Ok(Callee {
                kernel: function.kernel,
                context: Some(function.context),
            });
        }
        let kind = match self.graves.get(&raw) {
            Some(grave) if grave.kind == Kind::Kernel => Kind::Kernel,
            _ => Kind::Function,
        };
        Err(self.dead_handle(raw, kind, false))
    }

    /// `cuKernelGetFunction`: the kernel's function in the current context (one per context,
    /// the same handle on every call).
    pub fn kernel_function(&mut self, raw: Raw) -> Result<Raw, CuResult> {
        self.kernel(raw)?;
        let context = self.require_current("cuKernelGetFunction")?;
        if let Some(&function) = self.kernels[&raw].functions.get(&context) {
            return Ok(function);
        }
        let function = self.new_raw(Kind::Function);
        self.functions.insert(
            function,
            Function {
                raw: function,
                kernel: raw,
                context,
            },
        );
        self.kernels
            .get_mut(&raw)
            .expect("checked")
            .functions
            .insert(context, function);
        Ok(function)
    }

    /// The device whose attributes a `CUfunction`-taking call reads: the function's context's,
    /// or, for a kernel, the current context's (the driver loads it there).
    pub fn callee_device(&mut self, callee: Callee, what: &str) -> Result<usize, CuResult> {
        let context = match callee.context {
            Some(context) => context,
            None => self.require_current(what)?,
        };
        Ok(self.context(context)?.device)
    }

    /// `cuKernelGetAttribute`, `cuFuncGetAttribute`.
    pub fn kernel_attribute(
        &mut self,
        raw: Raw,
        attribute: u32,
        device: usize,
    ) -> Result<i32, CuResult> {
        let kernel = self.kernel(raw)?;
        let (attrs, sizes) = (kernel.attrs[device], kernel.sizes);
        let size = |bytes: u64| i32::try_from(bytes).unwrap_or(i32::MAX);
        Ok(match attribute {
            ATTR_MAX_THREADS_PER_BLOCK => MAX_THREADS_PER_BLOCK,
            ATTR_SHARED_SIZE_BYTES => size(sizes[0]),
            ATTR_CONST_SIZE_BYTES => size(sizes[1]),
            ATTR_LOCAL_SIZE_BYTES => size(sizes[2]),
            ATTR_NUM_REGS => 16,
            ATTR_PTX_VERSION | ATTR_BINARY_VERSION => 90,
            ATTR_CACHE_MODE_CA => 0,
            ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES => attrs.max_dynamic_shared,
            ATTR_PREFERRED_SHARED_MEMORY_CARVEOUT => attrs.carveout,
            // Cluster size must be set; required cluster width, height, depth: none.
            10..=13 => 0,
            ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED => attrs.non_portable_cluster,
            ATTR_CLUSTER_SCHEDULING_POLICY_PREFERENCE => attrs.cluster_policy,
            _ => return Err(INVALID_VALUE),
        })
    }

    /// `cuKernelSetAttribute`, `cuFuncSetAttribute`: only the attributes the driver lets a
    /// program set; the others are read-only (`CUDA_ERROR_INVALID_VALUE`).
    pub fn set_kernel_attribute(
        &mut self,
        raw: Raw,
        attribute: u32,
        value: i32,
        device: usize,
    ) -> Result<(), CuResult> {
        let attrs = &mut self.kernel(raw)?.attrs[device];
        match attribute {
            ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES if (0..=MAX_DYNAMIC_SHARED).contains(&value) => {
                attrs.max_dynamic_shared = value;
            }
            ATTR_PREFERRED_SHARED_MEMORY_CARVEOUT if (-1..=100).contains(&value) => {
                attrs.carveout = value;
            }
            ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED if (0..=1).contains(&value) => {
                attrs.non_portable_cluster = value;
            }
            ATTR_CLUSTER_SCHEDULING_POLICY_PREFERENCE if (0..=2).contains(&value) => {
                attrs.cluster_policy = value;
            }
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    }
}
