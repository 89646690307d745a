use handles_core::ResourceHandle;

fn free(_: u32, _: &Thing) -> Result<(), std::io::Error> {
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = u32, delet = free, acessor = as_id, colour = red)]
struct Thing {}

fn main() {}
