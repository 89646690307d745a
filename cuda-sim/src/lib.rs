//! Harness for the simulated CUDA driver built by this package.
//!
//! `cargo build -p cuda-sim` compiles the simulator (`src/driver/`) into
//! `<target>/cuda-sim/libcuda.so`. Nothing loads it unless asked: a program uses it only when
//! `LD_LIBRARY_PATH` names [`library_dir`] first, which [`command`] arranges for a child
//! process. The simulator's own code is not part of this library, so no program that links
//! this crate exports driver symbols.
#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding the simulator's `libcuda.so`: `CUDA_SIM_LIBRARY_DIR` at run time if
/// set (for copied test binaries), else `<target>/cuda-sim` of the build.
pub fn library_dir() -> PathBuf {
    match std::env::var_os("CUDA_SIM_LIBRARY_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CUDA_SIM_LIBRARY_DIR")),
    }
}

/// The version of the PyPI package `nvidia-cuda-nvrtc` that [`install_nvrtc`] installs: 13.0,
/// the release of the driver the simulator plays by default (13000, as driver 580 on the
/// H200). NVRTC writes the newest PTX ISA it knows, and a driver refuses a newer ISA than its
/// own (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`), on the GPU as here.
pub const NVRTC_VERSION: &str = "13.0.88";

/// The directory holding NVRTC (`libnvrtc.so.13`), which compiles CUDA C++ to PTX on any CPU:
/// `CUDA_SIM_NVRTC_DIR` if set; else the copy [`install_nvrtc`] keeps next to the simulator
/// (`<target>/nvrtc/nvidia/cu13/lib`); else the PyPI package `nvidia-cuda-nvrtc` in the
/// `python3` on the path; else, on first use, it is installed from PyPI by [`install_nvrtc`]
/// (so `cargo test` on a fresh machine needs no step of its own; set `CUDA_SIM_NO_INSTALL=1`
/// to forbid that). `None` when none of this yields it (offline, no `pip`), after one line
/// on standard error that says why.
pub fn nvrtc_dir() -> Option<PathBuf> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    if let Some(dir) = std::env::var_os("CUDA_SIM_NVRTC_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    FOUND
        .get_or_init(|| {
            if let Some(dir) = installed_nvrtc() {
                return Some(dir);
            }
            if let Some(dir) = site_nvrtc() {
                return Some(dir);
            }
            if std::env::var_os("CUDA_SIM_NO_INSTALL").is_some_and(|v| !v.is_empty()) {
                return None;
            }
            match install_nvrtc() {
                Ok(dir) => Some(dir),
                Err(why) => {
                    eprintln!("cuda-sim: NVRTC not found and not installed: {why}");
                    None
                }
            }
        })
        .clone()
}

/// Where [`install_nvrtc`] keeps NVRTC: `nvrtc/` next to the simulator's directory (the build's
/// target directory, or the folder `CUDA_SIM_LIBRARY_DIR` is in).
fn nvrtc_root() -> Option<PathBuf> {
    library_dir().parent().map(|target| target.join("nvrtc"))
}

fn has_nvrtc(dir: &Path) -> bool {
    dir.join("libnvrtc.so.13").is_file()
}

/// The library directory of the copy [`install_nvrtc`] made, if it is complete and of
/// [`NVRTC_VERSION`].
fn installed_nvrtc() -> Option<PathBuf> {
    let root = nvrtc_root()?;
    let lib = root.join("nvidia/cu13/lib");
    (has_nvrtc(&lib) && root.join(format!(".version-{NVRTC_VERSION}")).is_file()).then_some(lib)
}

/// The PyPI package in the site-packages of the `python3` on the path.
fn site_nvrtc() -> Option<PathBuf> {
    let output = Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .ok()?;
    let site = String::from_utf8(output.stdout).ok()?;
    let dir = Path::new(site.trim()).join("nvidia/cu13/lib");
    has_nvrtc(&dir).then_some(dir)
}

/// Installs NVRTC [`NVRTC_VERSION`] from PyPI (`python3 -m pip install --target`, no GPU
/// needed) into `<target>/nvrtc`, unless that copy is already there, and returns its library
/// directory. Safe to run from several processes at once: each installs into a directory of
/// its own and renames it into place; the first rename wins and the others use its copy.
pub fn install_nvrtc() -> Result<PathBuf, String> {
    if let Some(dir) = installed_nvrtc() {
        return Ok(dir);
    }
    let root = nvrtc_root().ok_or("the simulator's directory has no parent")?;
    let parent = root.parent().ok_or("the NVRTC directory has no parent")?;
    std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let partial = parent.join(format!("nvrtc.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    eprintln!(
        "cuda-sim: installing NVRTC {NVRTC_VERSION} from PyPI (nvidia-cuda-nvrtc) into {}",
        root.display()
    );
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--root-user-action=ignore",
            "--no-deps",
            "--target",
        ])
        .arg(&partial)
        .arg(format!("nvidia-cuda-nvrtc=={NVRTC_VERSION}"))
        .status()
        .map_err(|e| format!("cannot run python3 -m pip: {e}"))?;
    if !status.success() {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(format!(
            "pip install nvidia-cuda-nvrtc=={NVRTC_VERSION}: {status}"
        ));
    }
    std::fs::write(partial.join(format!(".version-{NVRTC_VERSION}")), b"")
        .map_err(|e| e.to_string())?;
    // A stale copy (another version, or one a failed install left incomplete) goes first.
    if root.exists() && installed_nvrtc().is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
    if std::fs::rename(&partial, &root).is_err() {
        // Another process put its copy in place first.
        let _ = std::fs::remove_dir_all(&partial);
    }
    installed_nvrtc()
        .ok_or_else(|| format!("no libnvrtc.so.13 in {} after the install", root.display()))
}

/// `LD_LIBRARY_PATH` for a program on the simulator: [`library_dir`] first, then
/// [`nvrtc_dir`] when there is one, then the caller's own path.
pub fn library_path() -> std::ffi::OsString {
    library_path_for(&library_dir())
}

/// [`library_path`] with the simulator's library taken from `dir`.
pub fn library_path_for(dir: &Path) -> std::ffi::OsString {
    let mut path = dir.as_os_str().to_os_string();
    if let Some(nvrtc) = nvrtc_dir() {
        path.push(":");
        path.push(nvrtc);
    }
    if let Some(existing) = std::env::var_os("LD_LIBRARY_PATH")
        && !existing.is_empty()
    {
        path.push(":");
        path.push(existing);
    }
    path
}

/// Whether the simulator's library has been built.
pub fn is_built() -> bool {
    library_dir().join("libcuda.so").is_file()
}

/// A command for `program` that loads the simulator: `LD_LIBRARY_PATH` is [`library_path`]
/// (the simulator first, then NVRTC). Settings of the parent's `CUDA_SIM_*` variables are
/// cleared, so each command states its own; use the helpers of [`SimCommand`].
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    command.env("LD_LIBRARY_PATH", library_path());
    for name in [
        "CUDA_SIM_DEVICES",
        "CUDA_SIM_MEMORY",
        "CUDA_SIM_FAIL",
        "CUDA_SIM_STRICT",
        "CUDA_SIM_REPORT",
        "CUDA_SIM_NO_GREEN_CONTEXTS",
        "CUDA_SIM_CHECK_DATA_RACE",
        "CUDA_SIM_CHECK_INITCHECK",
        "CUDA_SIM_CHECK_SYNCCHECK",
        "CUDA_SIM_CHECK_RACECHECK",
    ] {
        command.env_remove(name);
    }
    command
}

/// Writes a copy of the simulator's `libcuda.so` into `dir` that does not export `symbols`,
/// and returns `dir`, for a child's `LD_LIBRARY_PATH`: the copy plays a driver that lacks
/// those functions. Each name is renamed in place in the library's string tables (its first
/// letter becomes `x`), so the dynamic linker's lookup of the real name fails while every
/// other symbol resolves as before.
pub fn library_without(dir: &Path, symbols: &[&str]) -> std::io::Result<PathBuf> {
    let mut bytes = std::fs::read(library_dir().join("libcuda.so"))?;
    for symbol in symbols {
        let needle = [b"\0", symbol.as_bytes(), b"\0"].concat();
        let mut renamed = 0;
        let mut at = 0;
        while let Some(found) = find(&bytes[at..], &needle) {
            bytes[at + found + 1] = b'x';
            at += found + needle.len() - 1;
            renamed += 1;
        }
        if renamed == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("the simulator does not export {symbol}"),
            ));
        }
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("libcuda.so"), bytes)?;
    Ok(dir.to_path_buf())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Setters for the simulator's environment variables on a [`Command`].
pub trait SimCommand {
    /// `CUDA_SIM_DEVICES`: the number of devices.
    fn sim_devices(&mut self, devices: usize) -> &mut Self;
    /// `CUDA_SIM_MEMORY`: bytes of memory per device.
    fn sim_memory(&mut self, bytes: u64) -> &mut Self;
    /// `CUDA_SIM_FAIL`: `(function, n-th call, CUDA_ERROR_NAME)` entries.
    fn sim_fail(&mut self, failures: &[(&str, u64, &str)]) -> &mut Self;
    /// `CUDA_SIM_STRICT=1`: abort on the first violation.
    fn sim_strict(&mut self) -> &mut Self;
    /// `CUDA_SIM_REPORT`: where the report is written at exit (`%p` becomes the pid).
    fn sim_report(&mut self, path: impl AsRef<Path>) -> &mut Self;
    /// `CUDA_SIM_NO_GREEN_CONTEXTS=1`: the green-context functions answer
    /// `CUDA_ERROR_NOT_SUPPORTED`.
    fn sim_no_green_contexts(&mut self) -> &mut Self;
    /// `CUDA_SIM_CHECK_DATA_RACE`: the `data-race` check, on by default; `false` (`0`) turns
    /// it off.
    fn sim_check_data_race(&mut self, on: bool) -> &mut Self;
    /// `CUDA_SIM_CHECK_INITCHECK`: the `uninitialized-read` check and the `unused-allocation`
    /// notes, on by default; `false` (`0`) turns them off.
    fn sim_check_initcheck(&mut self, on: bool) -> &mut Self;
    /// `CUDA_SIM_CHECK_SYNCCHECK`: the `barrier-divergence` and `bad-warp-mask` checks, on by
    /// default; `false` (`0`) turns them off.
    fn sim_check_synccheck(&mut self, on: bool) -> &mut Self;
    /// `CUDA_SIM_CHECK_RACECHECK`: the `shared-race` check, on by default; `false` (`0`) turns
    /// it off.
    fn sim_check_racecheck(&mut self, on: bool) -> &mut Self;
}

impl SimCommand for Command {
    fn sim_devices(&mut self, devices: usize) -> &mut Self {
        self.env("CUDA_SIM_DEVICES", devices.to_string())
    }

    fn sim_memory(&mut self, bytes: u64) -> &mut Self {
        self.env("CUDA_SIM_MEMORY", bytes.to_string())
    }

    fn sim_fail(&mut self, failures: &[(&str, u64, &str)]) -> &mut Self {
        let spec: Vec<String> = failures
            .iter()
            .map(|(name, n, error)| format!("{name}:{n}:{error}"))
            .collect();
        self.env("CUDA_SIM_FAIL", spec.join(","))
    }

    fn sim_strict(&mut self) -> &mut Self {
        self.env("CUDA_SIM_STRICT", "1")
    }

    fn sim_report(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.env("CUDA_SIM_REPORT", path.as_ref())
    }

    fn sim_no_green_contexts(&mut self) -> &mut Self {
        self.env("CUDA_SIM_NO_GREEN_CONTEXTS", "1")
    }

    fn sim_check_data_race(&mut self, on: bool) -> &mut Self {
        self.env("CUDA_SIM_CHECK_DATA_RACE", if on { "1" } else { "0" })
    }

    fn sim_check_initcheck(&mut self, on: bool) -> &mut Self {
        self.env("CUDA_SIM_CHECK_INITCHECK", if on { "1" } else { "0" })
    }

    fn sim_check_synccheck(&mut self, on: bool) -> &mut Self {
        self.env("CUDA_SIM_CHECK_SYNCCHECK", if on { "1" } else { "0" })
    }

    fn sim_check_racecheck(&mut self, on: bool) -> &mut Self {
        self.env("CUDA_SIM_CHECK_RACECHECK", if on { "1" } else { "0" })
    }
}

/// Something the simulator noticed that is not a misuse (strict mode ignores it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// `unused-allocation`: a device allocation no memset, copy or kernel ever touched.
    pub kind: String,
    /// What it is about.
    pub message: String,
}

/// One violation the simulator found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// `unordered-free`, `unordered-unmap`, `use-after-free`, `destroyed-handle`,
    /// `double-destroy`, `wrong-context`, `out-of-bounds`, `no-access`, `misaligned`,
    /// `free-while-mapped`, `call-from-destructor`, `call-from-host-function`, `batch-conflict`
    /// `data-race`, `uninitialized-read`, `barrier-divergence`, `bad-warp-mask` or
    /// `device-exception`.
    pub kind: String,
    /// What happened, naming the calls involved and their sequence numbers.
    pub message: String,
    /// The driver function during which it was found.
    pub call: String,
}

/// The report the simulator writes at process exit (`CUDA_SIM_REPORT`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Violations, in the order found.
    pub violations: Vec<Violation>,
    /// Notes (not violations), e.g. `unused-allocation`.
    pub notes: Vec<Note>,
    /// Resources alive at exit, by type (`stream`, `event`, `pool`, `allocation`,
    /// `sync_allocation`, `host_allocation`, `import`, `context`, `primary_context`,
    /// `library`, `graph`, `graph_exec`, `user_object`, `physical_allocation`, `reservation`,
    /// `mapping`, `green_context`).
    pub leaks: BTreeMap<String, u64>,
    /// Calls by exported function.
    pub calls: BTreeMap<String, u64>,
}

impl Report {
    /// Parses a report.
    pub fn parse(text: &str) -> Result<Report, String> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let counts = |key: &str| -> BTreeMap<String, u64> {
            value[key]
                .as_object()
                .map(|map| {
                    map.iter()
                        .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                        .collect()
                })
                .unwrap_or_default()
        };
        let text = |v: &serde_json::Value, key: &str| v[key].as_str().unwrap_or("").to_string();
        let violations = value["violations"]
            .as_array()
            .ok_or("no violations list")?
            .iter()
            .map(|v| Violation {
                kind: text(v, "kind"),
                message: text(v, "message"),
                call: text(v, "call"),
            })
            .collect();
        let notes = value["notes"]
            .as_array()
            .map(|notes| {
                notes
                    .iter()
                    .map(|n| Note {
                        kind: text(n, "kind"),
                        message: text(n, "message"),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Report {
            violations,
            notes,
            leaks: counts("leaks"),
            calls: counts("calls"),
        })
    }

    /// Reads and parses the report at `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<Report, String> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the report {}: {e}", path.display()))?;
        Report::parse(&text)
    }

    /// Adds `other` (another process's report) to this one.
    pub fn merge(&mut self, other: Report) {
        self.violations.extend(other.violations);
        self.notes.extend(other.notes);
        for (kind, count) in other.leaks {
            *self.leaks.entry(kind).or_default() += count;
        }
        for (function, count) in other.calls {
            *self.calls.entry(function).or_default() += count;
        }
    }

    /// The report as JSON, in the form the simulator writes, with the number of `processes`
    /// whose reports it merges.
    pub fn to_json(&self, processes: usize) -> String {
        let violations: Vec<serde_json::Value> = self
            .violations
            .iter()
            .map(|v| serde_json::json!({"kind": v.kind, "message": v.message, "call": v.call}))
            .collect();
        let notes: Vec<serde_json::Value> = self
            .notes
            .iter()
            .map(|n| serde_json::json!({"kind": n.kind, "message": n.message}))
            .collect();
        serde_json::json!({
            "violations": violations,
            "notes": notes,
            "leaks": self.leaks,
            "calls": self.calls,
            "processes": processes,
        })
        .to_string()
    }

    /// The violations of `kind`.
    pub fn of_kind(&self, kind: &str) -> Vec<&Violation> {
        self.violations.iter().filter(|v| v.kind == kind).collect()
    }

    /// Leaks other than primary-context retains (which threads legitimately keep in their
    /// caches until exit).
    pub fn leaks_without_primary(&self) -> BTreeMap<String, u64> {
        self.leaks
            .iter()
            .filter(|(k, _)| k.as_str() != "primary_context")
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}

// The driver's unit tests. Its files name each other from the root of the library they are
// built into (`crate::base::types`, `crate::Sim`); here that root is this crate, so the
// driver's root items are brought up to it.
#[cfg(test)]
#[path = "driver/mod.rs"]
mod driver;
#[cfg(test)]
use driver::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_report() {
        let report = Report::parse(
            r#"{"violations":[{"kind":"unordered-free","message":"m","call":"cuMemFreeAsync","seq":3}],"leaks":{"stream":1},"calls":{"cuInit":1},"pid":1}"#,
        )
        .unwrap();
        assert_eq!(report.of_kind("unordered-free").len(), 1);
        assert_eq!(report.leaks["stream"], 1);
        assert_eq!(report.calls["cuInit"], 1);
    }

    #[test]
    fn the_library_is_in_its_own_directory() {
        let dir = library_dir();
        assert_eq!(dir.file_name().unwrap(), "cuda-sim");
        assert!(is_built(), "{} has no libcuda.so", dir.display());
    }
}
