// A crate that forbids unsafe code cannot opt into thread safety without the lint seeing it.
#![forbid(unsafe_code)]

use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32)]
struct Thing {}

unsafe impl handles_core::ThreadSafe for Thing {}

fn main() {}
