//! The checks that read the resources at run time and at exit: uninitialised reads, the host's
//! own accesses to managed memory, and the exit report (leaks, violations, calls). Above
//! `kernels`.

pub(crate) mod host_access;
pub(crate) mod initcheck;
pub(crate) mod report;
