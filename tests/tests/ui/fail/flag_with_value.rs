use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32, unsafe_send_sync = true, accessor)]
struct Thing {}

fn main() {}
