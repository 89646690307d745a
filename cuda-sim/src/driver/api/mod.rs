//! The exported driver API (`cu*`): every function goes through `faults::call` and then the
//! resources below. The top layer; nothing below imports it.

pub(crate) mod exports;
pub(crate) mod exports_batch;
pub(crate) mod exports_conditional;
pub(crate) mod exports_cudarc;
pub(crate) mod exports_graphs;
pub(crate) mod exports_green;
pub(crate) mod exports_kernels;
pub(crate) mod exports_tensor_maps;
pub(crate) mod exports_vmm;
pub(crate) mod faults;
pub(crate) mod graph_memory;
pub(crate) mod managed;
pub(crate) mod modules;
