//! The ground every other folder stands on: the driver's C types and error codes, the C library
//! calls, which exported function each thread is in, and the edges of the C interface.

pub(crate) mod abi;
pub(crate) mod calls;
pub(crate) mod errors;
pub(crate) mod sys;
pub(crate) mod types;
