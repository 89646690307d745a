//! cuBLAS, cuBLASLt, cuDNN and NCCL handles declared with `#[derive(ResourceHandle)]` on top of
//! handles-cuda, written as a downstream crate would write them: the public API only.
//!
//! | handle | owns | keeps alive |
//! |---|---|---|
//! | [`CublasHandle`] | a cuBLAS handle, bound to one stream | its stream and context |
//! | [`CublasLtHandle`] | a cuBLASLt handle | its context |
//! | [`MatmulDescHandle`] | a cuBLASLt matmul descriptor | — |
//! | [`CudnnHandle`] | a cuDNN handle, bound to one stream | its stream and context |
//! | [`NcclCommHandle`] | an NCCL communicator (one rank) | its stream and its device's context |
//!
//! Each library is loaded on first use; without it every constructor returns
//! [`LibError::Missing`], never a panic.
#![deny(missing_docs)]

mod checks;
mod cublas;
mod cublaslt;
mod cudnn;
mod error;
mod nccl;

pub use cublas::{Cublas, CublasBox, CublasHandle, CublasWeak};
pub use cublaslt::{
    CublasLt, CublasLtBox, CublasLtHandle, CublasLtWeak, MatmulDesc, MatmulDescBox,
    MatmulDescHandle, MatmulDescWeak,
};
pub use cudnn::{Cudnn, CudnnBox, CudnnHandle, CudnnWeak};
pub use error::LibError;
pub use nccl::{
    NcclComm, NcclCommBox, NcclCommHandle, NcclCommWeak, NcclUniqueId, all_reduce_sum_f32,
};

/// The context a stream's work runs in: the stream's own record must name it (streams made by
/// `StreamHandle::create` do).
fn context_of(
    stream: &handles_cuda::StreamHandle,
) -> Result<handles_cuda::ContextHandle, LibError> {
    stream
        .context()
        .clone()
        .ok_or(LibError::UnknownDevice { what: "stream" })
}
