use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32, registry = true, accessor)]
struct Thing {}

fn main() {}
