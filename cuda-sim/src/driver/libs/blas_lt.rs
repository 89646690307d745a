//! The simulated cuBLASLt (`libcublasLt.so.13`): handles, matmul descriptors, matrix layouts,
//! preferences, the heuristic query and `cublasLtMatmul`, as cudarc's `CudaBlasLT` calls them
//! (and any program that sticks to column-major layouts and the default epilogue).
//!
//! A matmul is `D = alpha * op(A) * op(B) + beta * C` computed by the same products as
//! cuBLAS's gemm (`gemm.rs`), with the compute and scale types of `cublasGemmEx`'s table, host
//! or device scalars (`CUBLASLT_MATMUL_DESC_POINTER_MODE` 0 or 1), transposed A and B, and
//! strided batches (`CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT`, `_STRIDED_BATCH_OFFSET`), checked
//! like a kernel on the stream it is given. Not simulated, answered with
//! `CUBLAS_STATUS_NOT_SUPPORTED` at `cublasLtMatmul`: epilogues other than the default (bias,
//! ReLU, GELU), a transposed C, row-major or other orders, and a D that is not C (another
//! address or layout). The heuristic returns one algorithm, needing no workspace; a workspace
//! given to the matmul is never touched.
//!
//! Descriptors, layouts and preferences are resources of the simulator like the handles: a
//! use after destruction is a `destroyed-handle`, a second destroy a `double-destroy`, and
//! those alive at exit are leaks (`cublaslt_handle`, `cublaslt_descriptor`).
//!
//! # Safety
//!
//! Every export is a C function of the cuBLASLt API: a non-null out-pointer is valid for a
//! write of its type, an attribute buffer for `size` bytes, host scalars in host pointer mode
//! for a read of the scale type, and `algo` for a read of `cublasLtMatmulAlgo_t`. Device
//! addresses are never dereferenced before the simulator checked them.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};

use super::blas::{CODES, INVALID_VALUE, NOT_SUPPORTED, compute, elem, transposes};
use super::gemm::{Gemm, Matrix, Scalars};
use super::{issue, put, start, with_sim};
use crate::Kind;
use crate::base::types::{CuResult, Raw};
use crate::resources::library_handles::LtObject;

/// `cublasLtGetVersion`'s answer: cuBLASLt 13.0.0, as `cublasGetVersion` answers.
const VERSION: usize = super::blas::VERSION as usize;

// `cublasLtMatmulDescAttributes_t`.
const DESC_POINTER_MODE: u32 = 2;
const DESC_TRANSA: u32 = 3;
const DESC_TRANSB: u32 = 4;
const DESC_TRANSC: u32 = 5;
const DESC_EPILOGUE: u32 = 7;
/// `CUBLASLT_EPILOGUE_DEFAULT`.
const EPILOGUE_DEFAULT: u64 = 1;
// `cublasLtMatrixLayoutAttribute_t`.
const LAYOUT_TYPE: u32 = 0;
const LAYOUT_ORDER: u32 = 1;
const LAYOUT_ROWS: u32 = 2;
const LAYOUT_COLS: u32 = 3;
const LAYOUT_LD: u32 = 4;
const LAYOUT_BATCH_COUNT: u32 = 5;
const LAYOUT_BATCH_STRIDE: u32 = 6;
/// The layout attributes' sizes in bytes (types, orders and batch counts are 32-bit).
fn layout_attribute_size(attribute: u32) -> Option<usize> {
    match attribute {
        LAYOUT_TYPE | LAYOUT_ORDER | LAYOUT_BATCH_COUNT => Some(4),
        LAYOUT_ROWS | LAYOUT_COLS | LAYOUT_LD | LAYOUT_BATCH_STRIDE | 7 => Some(8),
        _ => None,
    }
}

/// `cublasLtMatmulHeuristicResult_t`: the algorithm (64 opaque bytes), its workspace size,
/// its status, its waves count and four reserved ints.
#[repr(C)]
pub struct HeuristicResult {
    algo: [u64; 8],
    workspace_size: usize,
    state: u32,
    waves_count: f32,
    reserved: [c_int; 4],
}

/// Makes a descriptor of the simulator (`Kind::BlasLtObject`) and writes it to `out`.
fn create(out: *mut Raw, object: LtObject) -> Result<(), CuResult> {
    start(&CODES)?;
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    let raw = with_sim(&CODES, |sim| {
        let raw = sim.new_raw(Kind::BlasLtObject);
        sim.library_handles.lt_objects.insert(raw, object);
        Ok(raw)
    })?;
    put(out, raw, INVALID_VALUE)
}

fn destroy(raw: Raw) -> Result<(), CuResult> {
    with_sim(&CODES, |sim| {
        sim.lt_object(raw, true)?;
        sim.library_handles.lt_objects.remove(&raw);
        sim.bury(raw, Kind::BlasLtObject);
        Ok(())
    })
}

/// Stores attribute `attribute` of `raw` from `size` bytes at `buf` (at most eight).
fn set_attribute(
    raw: Raw,
    attribute: u32,
    buf: *const c_void,
    size: usize,
) -> Result<(), CuResult> {
    if buf.is_null() || size == 0 || size > 8 {
        return Err(INVALID_VALUE);
    }
    let mut bytes = [0u8; 8];
    // SAFETY: `buf` is valid for `size` bytes (the API's contract), and `size` <= 8.
    unsafe { std::ptr::copy_nonoverlapping(buf.cast::<u8>(), bytes.as_mut_ptr(), size) };
    let value = u64::from_le_bytes(bytes);
    let is_layout = with_sim(&CODES, |sim| {
        Ok(matches!(
            sim.lt_object(raw, false)?,
            LtObject::Layout { .. }
        ))
    })?;
    if is_layout && layout_attribute_size(attribute) != Some(size) {
        return Err(INVALID_VALUE);
    }
    with_sim(&CODES, |sim| {
        sim.lt_object(raw, false)?
            .attributes()
            .insert(attribute, value);
        Ok(())
    })
}

/// Writes attribute `attribute` of `raw` to `buf` (`size` bytes) and its size to `written`
/// (when not null); an attribute never set reads as 0.
fn get_attribute(
    raw: Raw,
    attribute: u32,
    buf: *mut c_void,
    size: usize,
    written: *mut usize,
) -> Result<(), CuResult> {
    let (value, is_layout) = with_sim(&CODES, |sim| {
        let object = sim.lt_object(raw, false)?;
        let is_layout = matches!(object, LtObject::Layout { .. });
        Ok((
            object.attributes().get(&attribute).copied().unwrap_or(0),
            is_layout,
        ))
    })?;
    let needed = if is_layout {
        layout_attribute_size(attribute).ok_or(INVALID_VALUE)?
    } else {
        4
    };
    if !written.is_null() {
        put(written, needed, INVALID_VALUE)?;
    }
    if size == 0 && buf.is_null() {
        return Ok(());
    }
    if buf.is_null() || size < needed {
        return Err(INVALID_VALUE);
    }
    // SAFETY: `buf` is valid for `size` >= `needed` bytes (the API's contract).
    unsafe { std::ptr::copy_nonoverlapping(value.to_le_bytes().as_ptr(), buf.cast(), needed) };
    Ok(())
}

/// A matrix layout, read from its descriptor: element type, rows, columns, leading
/// dimension, batch count and stride.
struct Layout {
    elem: u32,
    rows: u64,
    cols: u64,
    ld: i64,
    batch: i64,
    stride: i64,
}

/// The descriptors `raws`, copied out of the simulator: looked up there (a dead one is a
/// `destroyed-handle` and `NOT_INITIALIZED`), then read here, so that their own statuses
/// (`INVALID_VALUE`, `NOT_SUPPORTED`) are not taken for a lookup's.
fn lookup<const N: usize>(handle: Raw, raws: [Raw; N]) -> Result<[LtObject; N], CuResult> {
    with_sim(&CODES, |sim| {
        sim.blas_lt_handle(handle, false)?;
        let mut objects = Vec::with_capacity(N);
        for raw in raws {
            objects.push(sim.lt_object(raw, false)?.clone());
        }
        Ok(objects
            .try_into()
            .unwrap_or_else(|_| unreachable!("N objects")))
    })
}

fn layout(object: &LtObject) -> Result<Layout, CuResult> {
    let LtObject::Layout { attributes } = object else {
        return Err(INVALID_VALUE);
    };
    let get = |attribute| attributes.get(&attribute).copied().unwrap_or(0);
    if get(LAYOUT_ORDER) != 0 {
        // Only CUBLASLT_ORDER_COL.
        return Err(NOT_SUPPORTED);
    }
    Ok(Layout {
        elem: get(LAYOUT_TYPE) as u32,
        rows: get(LAYOUT_ROWS),
        cols: get(LAYOUT_COLS),
        ld: get(LAYOUT_LD) as i64,
        batch: (get(LAYOUT_BATCH_COUNT) as u32 as i32).max(1) as i64,
        stride: get(LAYOUT_BATCH_STRIDE) as i64,
    })
}

/// The matmul's description: compute and scale types, operations, pointer mode.
struct Description {
    compute: u32,
    scale: u32,
    transa: bool,
    transb: bool,
    device_scalars: bool,
}

fn description(object: &LtObject) -> Result<Description, CuResult> {
    let LtObject::Matmul {
        compute,
        scale,
        attributes,
    } = object
    else {
        return Err(INVALID_VALUE);
    };
    let get = |attribute| attributes.get(&attribute).copied().unwrap_or(0);
    let epilogue = attributes
        .get(&DESC_EPILOGUE)
        .copied()
        .unwrap_or(EPILOGUE_DEFAULT);
    if epilogue != EPILOGUE_DEFAULT || get(DESC_TRANSC) != 0 || get(DESC_POINTER_MODE) > 1 {
        return Err(NOT_SUPPORTED);
    }
    Ok(Description {
        compute: *compute,
        scale: *scale,
        transa: transposes(get(DESC_TRANSA) as c_int)?,
        transb: transposes(get(DESC_TRANSB) as c_int)?,
        device_scalars: get(DESC_POINTER_MODE) == 1,
    })
}

/// A stored matrix as the product's operand: `op` transposes it.
fn operand(addr: u64, layout: &Layout, op: bool) -> Result<Matrix, CuResult> {
    if layout.ld < layout.rows.max(1) as i64 {
        return Err(INVALID_VALUE);
    }
    let (rows, cols) = if op {
        (layout.cols, layout.rows)
    } else {
        (layout.rows, layout.cols)
    };
    Ok(Matrix {
        addr,
        elem: elem(layout.elem)?,
        rows,
        cols,
        rs: if op { layout.ld } else { 1 },
        cs: if op { 1 } else { layout.ld },
        stride: layout.stride,
    })
}

library_fns! { CODES.statuses;
    /// Creates a handle (the driver is started as the runtime would). It belongs to no
    /// context: each matmul runs on the stream it is given.
    fn cublasLtCreate(handle: *mut Raw) {
        start(&CODES)?;
        if handle.is_null() {
            return Err(INVALID_VALUE);
        }
        let raw = with_sim(&CODES, |sim| {
            let raw = sim.new_raw(Kind::BlasLtHandle);
            sim.library_handles.blas_lt.insert(raw);
            Ok(raw)
        })?;
        put(handle, raw, INVALID_VALUE)
    }

    fn cublasLtDestroy(handle: Raw) {
        with_sim(&CODES, |sim| {
            sim.blas_lt_handle(handle, true)?;
            sim.library_handles.blas_lt.remove(&handle);
            sim.bury(handle, Kind::BlasLtHandle);
            Ok(())
        })
    }

    fn cublasLtMatmulDescCreate(desc: *mut Raw, compute_type: u32, scale_type: u32) {
        create(desc, LtObject::Matmul {
            compute: compute_type,
            scale: scale_type,
            attributes: HashMap::new(),
        })
    }

    fn cublasLtMatmulDescDestroy(desc: Raw) {
        destroy(desc)
    }

    fn cublasLtMatmulDescSetAttribute(desc: Raw, attribute: u32, buf: *const c_void, size: usize) {
        set_attribute(desc, attribute, buf, size)
    }

    fn cublasLtMatmulDescGetAttribute(
        desc: Raw, attribute: u32, buf: *mut c_void, size: usize, written: *mut usize
    ) {
        get_attribute(desc, attribute, buf, size, written)
    }

    fn cublasLtMatrixLayoutCreate(layout: *mut Raw, elem_type: u32, rows: u64, cols: u64, ld: i64) {
        let attributes = HashMap::from([
            (LAYOUT_TYPE, elem_type as u64),
            (LAYOUT_ROWS, rows),
            (LAYOUT_COLS, cols),
            (LAYOUT_LD, ld as u64),
            (LAYOUT_BATCH_COUNT, 1),
        ]);
        create(layout, LtObject::Layout { attributes })
    }

    fn cublasLtMatrixLayoutDestroy(layout: Raw) {
        destroy(layout)
    }

    fn cublasLtMatrixLayoutSetAttribute(layout: Raw, attribute: u32, buf: *const c_void, size: usize) {
        set_attribute(layout, attribute, buf, size)
    }

    fn cublasLtMatrixLayoutGetAttribute(
        layout: Raw, attribute: u32, buf: *mut c_void, size: usize, written: *mut usize
    ) {
        get_attribute(layout, attribute, buf, size, written)
    }

    fn cublasLtMatmulPreferenceCreate(preference: *mut Raw) {
        create(preference, LtObject::Preference { attributes: HashMap::new() })
    }

    fn cublasLtMatmulPreferenceDestroy(preference: Raw) {
        destroy(preference)
    }

    fn cublasLtMatmulPreferenceSetAttribute(
        preference: Raw, attribute: u32, buf: *const c_void, size: usize
    ) {
        set_attribute(preference, attribute, buf, size)
    }

    /// One algorithm, needing no workspace, for any description the matmul accepts; a
    /// description it would refuse gets its status here too (`NOT_SUPPORTED`), as cuBLASLt
    /// finds no algorithm for it.
    fn cublasLtMatmulAlgoGetHeuristic(
        handle: Raw, desc: Raw, a: Raw, b: Raw, c: Raw, d: Raw, preference: Raw,
        requested: c_int, results: *mut HeuristicResult, count: *mut c_int
    ) {
        if requested < 1 || results.is_null() || count.is_null() {
            return Err(INVALID_VALUE);
        }
        let [desc, a, b, c, d, _preference] = lookup(handle, [desc, a, b, c, d, preference])?;
        description(&desc)?;
        for object in [a, b, c, d] {
            layout(&object)?;
        }
        let result = HeuristicResult {
            algo: [0; 8],
            workspace_size: 0,
            state: 0,
            waves_count: 1.0,
            reserved: [0; 4],
        };
        put(results, result, INVALID_VALUE)?;
        put(count, 1, INVALID_VALUE)
    }

    /// `D = alpha * op(A) * op(B) + beta * C` on `stream` (see the module docs for what is
    /// simulated).
    fn cublasLtMatmul(
        handle: Raw, desc: Raw, alpha: *const c_void, a: *const c_void, a_desc: Raw,
        b: *const c_void, b_desc: Raw, beta: *const c_void, c: *const c_void, c_desc: Raw,
        d: *mut c_void, d_desc: Raw, algo: *const c_void, workspace: *mut c_void,
        workspace_size: usize, stream: Raw
    ) {
        let _ = (algo, workspace, workspace_size);
        let [desc, a_desc, b_desc, c_desc, d_desc] =
            lookup(handle, [desc, a_desc, b_desc, c_desc, d_desc])?;
        let description = description(&desc)?;
        let (la, lb, lc, ld) =
            (layout(&a_desc)?, layout(&b_desc)?, layout(&c_desc)?, layout(&d_desc)?);
        if d as u64 != c as u64
            || (ld.elem, ld.rows, ld.cols, ld.ld, ld.batch, ld.stride)
                != (lc.elem, lc.rows, lc.cols, lc.ld, lc.batch, lc.stride)
        {
            return Err(NOT_SUPPORTED);
        }
        let ma = operand(a as u64, &la, description.transa)?;
        let mb = operand(b as u64, &lb, description.transb)?;
        let mc = operand(c as u64, &lc, false)?;
        let (m, k, n) = (ma.rows, ma.cols, mc.cols);
        if mb.rows != k || mb.cols != n || mc.rows != m || la.batch != lc.batch
            || lb.batch != lc.batch
        {
            return Err(INVALID_VALUE);
        }
        let (scalar, precision) = compute(description.compute, ma.elem, mb.elem, mc.elem)?;
        if elem(description.scale)? != scalar {
            return Err(NOT_SUPPORTED);
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        let scalars = if description.device_scalars {
            Scalars::Device { alpha: alpha as u64, beta: beta as u64, elem: scalar }
        } else {
            if alpha.is_null() || beta.is_null() {
                return Err(INVALID_VALUE);
            }
            // SAFETY: non-null host scalars of the scale type, by the API's contract in host
            // pointer mode.
            let (alpha, beta) = unsafe { (scalar.load(alpha as u64), scalar.load(beta as u64)) };
            Scalars::Host { alpha, beta }
        };
        let work = Gemm {
            call: "cublasLtMatmul",
            m,
            n,
            k,
            batch: lc.batch as u64,
            a: ma,
            b: mb,
            c: mc,
            precision,
            scalars,
        };
        if work.widest_footprint().is_none() {
            return Err(INVALID_VALUE);
        }
        issue(&CODES, "cublasLtMatmul", stream, work)
    }
}

/// `cublasLtGetVersion`: the version as a number, not a status.
#[allow(non_snake_case)]
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cublasLtGetVersion() -> usize {
    VERSION
}
