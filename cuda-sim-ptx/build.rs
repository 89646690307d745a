//! Tells the packages that link the interpreter's source into their own build (the simulated
//! driver, which `cuda-sim`'s build script compiles with `rustc`) where that source is:
//! `DEP_CUDA_SIM_PTX_SRC` in their build scripts.

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:src={manifest}/src");
}
