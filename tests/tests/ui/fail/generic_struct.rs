use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32)]
struct Thing<T> {
    value: T,
}

fn main() {}
