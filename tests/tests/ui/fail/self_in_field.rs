use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32)]
struct Node {
    children: Vec<Box<Self>>,
    parent: Option<std::sync::Arc<Self>>,
}

fn main() {}
