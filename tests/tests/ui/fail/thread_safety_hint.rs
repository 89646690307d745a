use handles_core::ResourceHandle;

fn close(_: i32, _: &Fd) -> Result<(), std::io::Error> {
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = i32, delete = close)]
struct Fd {}

fn main() {
    // SAFETY: a stand-in descriptor; the deleter does nothing.
    let fd = unsafe { FdHandle::from_raw(3, Fd {}) };
    std::thread::spawn(move || drop(fd));
}
