use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32, accessor = close)]
struct Thing {}

fn main() {}
