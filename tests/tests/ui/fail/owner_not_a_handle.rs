use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32)]
struct Thing {
    #[owner]
    parent: u64,
}

fn main() {}
