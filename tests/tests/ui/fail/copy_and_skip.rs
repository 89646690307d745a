use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32)]
struct Thing {
    #[handle(copy, skip)]
    len: usize,
}

fn main() {}
