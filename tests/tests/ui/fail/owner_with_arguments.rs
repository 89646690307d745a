use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32)]
struct Parent {}

#[derive(ResourceHandle)]
#[handle(raw = u32)]
struct Child {
    #[owner(strong)]
    #[owner]
    parent: ParentHandle,
}

fn main() {}
