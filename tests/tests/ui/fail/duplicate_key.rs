use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32, accessor = as_id)]
#[handle(raw = u64)]
struct Thing {}

fn main() {}
