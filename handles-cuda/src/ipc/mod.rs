//! Sharing between processes: pointers, events, pools, and descriptor passing.

pub(crate) mod event;
pub(crate) mod fd_passing;
pub(crate) mod pointer;
pub(crate) mod pool;
