//! CUDA graphs: nodes, captures, executable graphs.

pub(crate) mod nodes;
