use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32, accessor = as_id)]
struct Thing {
    as_id: u32,
    downgrade: bool,
}

fn main() {}
