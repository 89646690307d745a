use handles_core::ResourceHandle;

fn free(_: u32, _: &Thing) -> Result<(), std::io::Error> {
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(delete = free)]
struct Thing {}

fn main() {}
