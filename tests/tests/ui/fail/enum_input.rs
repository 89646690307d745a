use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32)]
enum Thing {
    A,
    B,
}

fn main() {}
