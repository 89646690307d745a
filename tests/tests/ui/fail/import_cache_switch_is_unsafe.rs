// Switching the IPC import cache off removes the only guard against the driver's duplicate-
// import double unmap, so it is an `unsafe fn` with a contract.
fn main() {
    handles_cuda::ipc::set_import_cache_enabled(false);
}
