use handles_core::ResourceHandle;

fn close(_: i32, _: &mut Fd) -> Result<(), std::io::Error> {
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = i32, delete = close)]
struct Fd {}

fn main() {}
