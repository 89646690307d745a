use handles_core::ResourceHandle;

fn free(_: u64) -> bool {
    true
}

#[derive(ResourceHandle)]
#[handle(raw = u32, delete = free)]
struct Thing {}

fn main() {}
