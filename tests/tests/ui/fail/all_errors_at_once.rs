use handles_core::ResourceHandle;

#[derive(ResourceHandle)]
#[handle(raw = u32, raw = u64, dlete = free, registry)]
struct Thing {
    #[owner(weak)]
    parent: Option<ThingHandle>,
}

fn main() {}
