//! The model of each driver resource: devices, contexts and green contexts, streams, events and
//! the work they carry, memory (allocations, pools, virtual memory, IPC), libraries and kernels,
//! stream capture, graphs, conditional nodes, user objects, and the simulated libraries' handles. Above `order`, which checks them.

pub(crate) mod capture;
pub(crate) mod conditional;
pub(crate) mod contexts;
pub(crate) mod deferred;
pub(crate) mod devices;
pub(crate) mod events;
pub(crate) mod graphs;
pub(crate) mod green;
pub(crate) mod ipc;
pub(crate) mod kernels;
pub(crate) mod launch;
pub(crate) mod launch_attributes;
pub(crate) mod libraries;
pub(crate) mod library_handles;
pub(crate) mod memory;
pub(crate) mod occupancy;
pub(crate) mod pools;
pub(crate) mod streams;
pub(crate) mod tensor_maps;
pub(crate) mod user_objects;
pub(crate) mod vmm;
pub(crate) mod work;
