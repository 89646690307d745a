use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
struct Thing {
    len: usize,
}

fn main() {}
