//! What runs on the simulated device: kernel launches handed to the PTX interpreter (`cuda-sim-ptx`) with every access
//! checked, and device `printf` output. Above `resources`.

pub(crate) mod interp;
pub(crate) mod printf;
