use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32, registry)]
struct Thing {}

fn main() {}
