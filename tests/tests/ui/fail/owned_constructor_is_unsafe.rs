use handles_core::ResourceHandle;

fn free(_: u32, _: &Thing) -> Result<(), std::io::Error> {
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = u32, delete = free)]
struct Thing {}

fn main() {
    let _ = ThingHandle::from_raw(3, Thing {});
}
