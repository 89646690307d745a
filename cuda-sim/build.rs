//! Compiles the simulated driver (`src/driver/mod.rs`) into `<target>/cuda-sim/libcuda.so`.
//!
//! The library is built with `rustc` directly, as a cdylib named `cuda`, into a directory of
//! its own: never into `target/<profile>` or `target/<profile>/deps`, which cargo puts on the
//! library path of the programs it runs. A file named `libcuda.so` there would replace the
//! real driver on a GPU machine.

use std::path::{Path, PathBuf};
use std::process::Command;

fn target_dir(out_dir: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        if dir.is_absolute() {
            return dir;
        }
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        return workspace.join(dir);
    }
    // OUT_DIR = <target>/[<triple>/]<profile>/build/<pkg>-<hash>/out
    let mut dir = out_dir.to_path_buf();
    while let Some(parent) = dir.parent() {
        if dir.file_name().is_some_and(|name| name == "build") {
            // `parent` is the profile directory; its parent the target (or triple) directory.
            let mut target = parent.parent().unwrap_or(parent).to_path_buf();
            if target.join("CACHEDIR.TAG").exists() {
                return target;
            }
            // A cross-compilation triple directory sits between the target dir and profile.
            if let Some(above) = target.parent()
                && above.join("CACHEDIR.TAG").exists()
            {
                target = above.to_path_buf();
            }
            return target;
        }
        dir = parent.to_path_buf();
    }
    panic!(
        "cannot find the target directory above OUT_DIR {}",
        out_dir.display()
    );
}

/// The names the library is also installed under (links to `libcuda.so`); `src/main.rs` makes
/// the same links next to the library it writes.
const LINKS: [&str; 9] = [
    "libcuda.so.1",
    "libcublas.so",
    "libcublas.so.13",
    "libcublasLt.so",
    "libcublasLt.so.13",
    "libcurand.so",
    "libcurand.so.10",
    "libcudart.so",
    "libcudart.so.13",
];

fn main() {
    println!("cargo:rerun-if-changed=src/driver");
    // The interpreter's source, from its own package (a dependency with `links`).
    let interpreter_source = PathBuf::from(
        std::env::var_os("DEP_CUDA_SIM_PTX_SRC").expect("cuda-sim-ptx tells where its source is"),
    );
    println!("cargo:rerun-if-changed={}", interpreter_source.display());
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dir = target_dir(&out_dir).join("cuda-sim");
    std::fs::create_dir_all(&dir).expect("create <target>/cuda-sim");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir"));
    // The PTX interpreter (`../cuda-sim-ptx`, the `cuda-sim-ptx` package) first, as an rlib the driver
    // links; optimised, since it runs every kernel.
    let interpreter = out_dir.join("libcuda_sim_ptx.rlib");
    let status = Command::new(&rustc)
        .args([
            "--edition",
            "2024",
            "--crate-type",
            "rlib",
            "--crate-name",
            "cuda_sim_ptx",
            "-C",
            "opt-level=3",
            "-C",
            "debuginfo=1",
            "--cap-lints",
            "warn",
        ])
        .arg("-o")
        .arg(&interpreter)
        .arg(interpreter_source.join("lib.rs"))
        .status()
        .expect("run rustc for the PTX interpreter");
    assert!(status.success(), "compiling the PTX interpreter failed");
    // Built under another name first: no file called libcuda.so outside `<target>/cuda-sim`.
    let built = out_dir.join("cuda_sim_driver.so");
    let status = Command::new(&rustc)
        .args([
            "--edition",
            "2024",
            "--crate-type",
            "cdylib",
            "--crate-name",
            "cuda",
        ])
        .args([
            "-C",
            "opt-level=1",
            "-C",
            "debuginfo=1",
            "--cap-lints",
            "warn",
        ])
        .arg("--extern")
        .arg(format!("cuda_sim_ptx={}", interpreter.display()))
        .arg("-o")
        .arg(&built)
        .arg(manifest.join("src/driver/mod.rs"))
        .status()
        .expect("run rustc for the simulated driver");
    assert!(status.success(), "compiling the simulated driver failed");
    // Copy, then rename: a running test never sees a half-written library.
    let temporary = dir.join(".libcuda.so.tmp");
    std::fs::copy(&built, &temporary).expect("copy libcuda.so");
    std::fs::rename(&temporary, dir.join("libcuda.so")).expect("install libcuda.so");
    // The simulated libraries (cuBLAS, cuRAND) are the same file under their names: the
    // dynamic loader loads one file once, so they share the driver's state.
    for name in LINKS {
        let _ = std::fs::remove_file(dir.join(name));
        std::os::unix::fs::symlink("libcuda.so", dir.join(name)).expect("link to libcuda.so");
    }
    println!("cargo:rustc-env=CUDA_SIM_LIBRARY_DIR={}", dir.display());
    // The runner binary embeds the library, so that an installed `cuda-sim` needs no target
    // directory.
    println!("cargo:rustc-env=CUDA_SIM_LIBRARY_FILE={}", built.display());
}
