//! Device code: images, libraries, kernels, launches, and NVRTC programs.

pub(crate) mod image;
pub(crate) mod kernel;
pub(crate) mod launch;
pub(crate) mod library;
pub(crate) mod program;
