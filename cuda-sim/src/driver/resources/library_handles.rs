//! The handles of the simulated libraries (`libs/`): cuBLAS and cuBLASLt handles, cuBLASLt
//! descriptors, and cuRAND generators.
//! Each is a resource like a stream: it belongs to the context current at its creation, is
//! counted as a leak while alive (`cublas_handle`, `curand_generator`), and keeps a tombstone
//! once destroyed, so a later use is a **destroyed handle** and a second destroy a **double
//! destroy**.

use crate::base::types::{CuResult, Raw};
use crate::{Kind, Sim};

/// A cuBLAS handle (`cublasHandle_t`).
#[derive(Clone, Debug)]
pub struct BlasHandle {
    /// The context current at `cublasCreate_v2`.
    pub context: Raw,
    /// The stream set by `cublasSetStream_v2` (0: the default stream).
    pub stream: Raw,
    /// `cublasPointerMode_t`: 0 host, 1 device.
    pub pointer_mode: u32,
    /// `cublasMath_t`, as set (it changes nothing here).
    pub math_mode: u32,
    /// `cublasSetWorkspace_v2`'s buffer and size (never touched here).
    pub workspace: (u64, usize),
}

/// A cuRAND generator (`curandGenerator_t`).
#[derive(Clone, Debug)]
pub struct Generator {
    /// The context current at `curandCreateGenerator`.
    pub context: Raw,
    /// `curandRngType_t`.
    pub rng_type: u32,
    /// The stream set by `curandSetStream` (0: the default stream).
    pub stream: Raw,
    pub seed: u64,
    /// The position in the sequence: the next value generated is value `offset`.
    pub offset: u64,
}

/// What a cuBLASLt descriptor describes, with its attributes by number (values up to eight
/// bytes, little-endian, as set).
#[derive(Clone, Debug)]
pub enum LtObject {
    /// `cublasLtMatmulDesc_t`: the compute type and scale type, then attributes.
    Matmul {
        compute: u32,
        scale: u32,
        attributes: std::collections::HashMap<u32, u64>,
    },
    /// `cublasLtMatrixLayout_t`: attributes 0 (type) to 6 (strided batch offset).
    Layout {
        attributes: std::collections::HashMap<u32, u64>,
    },
    /// `cublasLtMatmulPreference_t`.
    Preference {
        attributes: std::collections::HashMap<u32, u64>,
    },
}

impl LtObject {
    pub fn attributes(&mut self) -> &mut std::collections::HashMap<u32, u64> {
        match self {
            LtObject::Matmul { attributes, .. }
            | LtObject::Layout { attributes }
            | LtObject::Preference { attributes } => attributes,
        }
    }
}

/// The live library handles.
#[derive(Default)]
pub struct LibraryHandles {
    pub blas: std::collections::HashMap<Raw, BlasHandle>,
    pub generators: std::collections::HashMap<Raw, Generator>,
    /// cuBLASLt handles (they keep no state here).
    pub blas_lt: std::collections::HashSet<Raw>,
    /// cuBLASLt matmul descriptors, matrix layouts and preferences.
    pub lt_objects: std::collections::HashMap<Raw, LtObject>,
}

impl Sim {
    /// The live cuBLAS handle `raw`, or the error of a dead one (reported as a use, or a
    /// double destroy when `destroying`).
    pub fn blas_handle(&mut self, raw: Raw, destroying: bool) -> Result<&mut BlasHandle, CuResult> {
        if !self.library_handles.blas.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::BlasHandle, destroying));
        }
        Ok(self
            .library_handles
            .blas
            .get_mut(&raw)
            .expect("checked above"))
    }

    /// The live cuBLASLt handle `raw`, or the error of a dead one.
    pub fn blas_lt_handle(&mut self, raw: Raw, destroying: bool) -> Result<(), CuResult> {
        if !self.library_handles.blas_lt.contains(&raw) {
            return Err(self.dead_handle(raw, Kind::BlasLtHandle, destroying));
        }
        Ok(())
    }

    /// The live cuBLASLt descriptor, layout or preference `raw`, or the error of a dead one.
    pub fn lt_object(&mut self, raw: Raw, destroying: bool) -> Result<&mut LtObject, CuResult> {
        if !self.library_handles.lt_objects.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::BlasLtObject, destroying));
        }
        Ok(self
            .library_handles
            .lt_objects
            .get_mut(&raw)
            .expect("checked above"))
    }

    /// The live cuRAND generator `raw`, or the error of a dead one.
    pub fn generator(&mut self, raw: Raw, destroying: bool) -> Result<&mut Generator, CuResult> {
        if !self.library_handles.generators.contains_key(&raw) {
            return Err(self.dead_handle(raw, Kind::RandGenerator, destroying));
        }
        Ok(self
            .library_handles
            .generators
            .get_mut(&raw)
            .expect("checked above"))
    }

    /// Reports a library call made with another context current than the one its handle
    /// was created in (`what` names the handle). cuBLAS and cuRAND bind a handle to the
    /// context current at its creation; the simulator runs the work anyway, on the stream the
    /// handle names.
    pub fn check_handle_context(&mut self, owner: Raw, what: &str) {
        let current = crate::resources::contexts::current();
        if current != owner {
            let (call, seq) = crate::base::calls::current_call();
            self.checker.violation(
                "wrong-context",
                format!(
                    "{call} (call #{seq}) uses {what}, created in context {owner:#x}, with context {current:#x} current"
                ),
            );
        }
    }
}
