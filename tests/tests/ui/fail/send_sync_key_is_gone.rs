use handles_core::ResourceHandle;

// The thread-safety opt-in is the author's own `unsafe impl`, never a key the macro expands.
#[derive(ResourceHandle)]
#[handle(raw = u32, unsafe_send_sync)]
struct Thing {}

fn main() {}
