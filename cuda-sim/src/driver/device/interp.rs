//! Kernel launches on the PTX interpreter (`cuda-sim-ptx`, in `../cuda-sim-ptx`): the memory a kernel
//! may touch is a snapshot of the live allocations and module variables, every access is
//! checked against it, the regions it touched become uses on the launch's timeline (so frees
//! are ordered against launches), and a refused access is reported as the violation it is:
//! **out of bounds**, **use after free** or **no access**, naming the kernel, the block, the
//! thread, the address and the instruction. Device `printf` output is kept until the host
//! synchronises, then printed on stdout, as the GPU's is.

use cuda_sim_ptx::{Fault, LaunchArgs, Memory, Module, SharedRace};

use crate::Sim;
use crate::base::calls;
use crate::base::errors::NOT_SUPPORTED;
use crate::base::types::{ACCESS_NONE, CuResult};
use crate::order::checker::Use;
use crate::order::races::Touch;
use crate::resources::launch::Launch;
use crate::resources::memory::AllocKind;
use crate::resources::work::kernel_ns;

/// `CUDA_ERROR_ILLEGAL_ADDRESS`: what a kernel touching memory it may not touch gets.
pub const ILLEGAL_ADDRESS: CuResult = 700;
/// `CUDA_ERROR_LAUNCH_FAILED`: a trap (a hardware exception), a block whose barrier not every
/// thread reaches, or a warp collective that cannot complete (or whose lane is not in its own
/// member mask).
pub const LAUNCH_FAILED: CuResult = 719;
/// `CUDA_ERROR_MISALIGNED_ADDRESS`.
pub const MISALIGNED_ADDRESS: CuResult = 716;
/// `CUDA_ERROR_ASSERT`: a device-side `assert` failed.
pub const ASSERT: CuResult = 710;

/// One region a kernel may touch: a live allocation (or module variable), or one it may
/// not (another device's pool memory without access, a mapping without access), or may only
/// read (an import of this process's own IPC host pool: `Sim::refuses_device_writes`).
#[derive(Clone, Copy, Debug)]
struct Region {
    start: u64,
    end: u64,
    denied: bool,
    read_only: bool,
}

/// The snapshot the interpreter checks every global access against.
struct Snapshot {
    /// Sorted by start; regions do not overlap.
    regions: Vec<Region>,
    /// Bytes of device allocations never written before the launch (`initcheck`).
    unwritten: Vec<(u64, u64)>,
}

impl Snapshot {
    fn find(&self, addr: u64) -> Option<usize> {
        let index = self.regions.partition_point(|r| r.start <= addr);
        let index = index.checked_sub(1)?;
        (addr < self.regions[index].end).then_some(index)
    }
}

impl Snapshot {
    /// Where an address in no region lies: just past an allocation (by how many bytes), or
    /// far from every one.
    fn nearest(&self, addr: u64) -> String {
        let next = self.regions.partition_point(|r| r.start <= addr);
        let after = next
            .checked_sub(1)
            .map(|i| self.regions[i])
            .map(|r| (addr - r.end, r));
        let before = self.regions.get(next).map(|r| (r.start - addr, *r));
        let size = |r: Region| r.end - r.start;
        match (after, before) {
            (_, Some((gap, region)))
                if gap < 1 << 20 && after.is_none_or(|(other, _)| gap < other) =>
            {
                format!(
                    "{gap} bytes before the {}-byte allocation at {:#x}",
                    size(region),
                    region.start
                )
            }
            (Some((gap, region)), _) if gap < 1 << 20 => format!(
                "{gap} bytes past the end of the {}-byte allocation at {:#x}",
                size(region),
                region.start
            ),
            _ => "in no allocation".to_string(),
        }
    }
}

impl Memory for Snapshot {
    fn check(&self, addr: u64, len: u64, write: bool) -> Option<usize> {
        let index = self.find(addr)?;
        let region = &self.regions[index];
        let end = addr.checked_add(len)?;
        let refused = region.denied || write && region.read_only;
        (!refused && end <= region.end).then_some(index)
    }

    fn regions(&self) -> usize {
        self.regions.len()
    }

    /// Regions are sorted, do not overlap and do not change during a launch, so an approved
    /// region approves every access of the same kind inside it (denied regions are never
    /// approved, read-only ones never for a write).
    fn region_bounds(&self, region: usize) -> Option<(u64, u64)> {
        self.regions.get(region).map(|r| (r.start, r.end))
    }

    fn uninitialised(&self) -> &[(u64, u64)] {
        &self.unwritten
    }
}

/// CPU threads a launch uses: blocks are independent, so they run in parallel.
fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

impl Sim {
    /// Whether device work of `device` may touch the allocation starting at `start`.
    fn may_touch(&self, start: u64, device: Option<usize>) -> bool {
        let alloc = &self.allocs[&start];
        if alloc.kind == AllocKind::Mapping {
            return self
                .mapping_at(start)
                .is_some_and(|(_, mapping)| mapping.accessible_by(device));
        }
        let Some(pool) = alloc.pool.and_then(|raw| self.pools.get(&raw)) else {
            return true;
        };
        match (pool.device, device) {
            (Some(owner), Some(device)) if owner == device => true,
            // Another device's pool, or a host pool: only with access granted.
            (_, Some(device)) => pool.access.get(device).is_some_and(|&a| a != ACCESS_NONE),
            _ => true,
        }
    }

    /// Runs `launch` on the interpreter as operation `op` of its stream.
    pub fn run_kernel(&mut self, launch: &Launch, op: Use) -> Result<(), CuResult> {
        let kernel = self.kernel(launch.kernel)?;
        let (library, entry) = (kernel.library, kernel.index);
        let name = kernel.name.to_string_lossy().into_owned();
        let (module, globals) = {
            let library = self.library(library)?;
            (library.module.clone(), library.globals.clone())
        };
        let device = self.operation_device(op);
        let starts: Vec<u64> = self.allocs.keys().copied().collect();
        let regions = starts
            .iter()
            .map(|&start| {
                let alloc = &self.allocs[&start];
                Region {
                    start,
                    end: start + alloc.size,
                    denied: !self.may_touch(start, device),
                    read_only: self.refuses_device_writes(start),
                }
            })
            .collect();
        let snapshot = Snapshot {
            regions,
            unwritten: self.initcheck.unwritten(),
        };
        let args = LaunchArgs {
            entry,
            grid: launch.grid,
            block: launch.block,
            dynamic_shared: launch.shared,
            params: &launch.args,
            globals: &globals,
            workers: workers(),
            synccheck: self.config.check_synccheck,
            racecheck: self.config.check_racecheck,
        };
        let (outcome, fault) = match cuda_sim_ptx::run(&module, &snapshot, &args) {
            Ok(outcome) => (outcome, None),
            Err((fault, outcome)) => (outcome, Some(fault)),
        };
        for &(region, _) in &outcome.touched {
            if let Some(alloc) = self.allocs.get_mut(&starts[region]) {
                alloc.uses.insert(op.timeline, op);
            }
        }
        if self.races.enabled() {
            let touches: Vec<Touch> = outcome.footprint.iter().map(Touch::from).collect();
            self.check_races(op, format!("kernel {name}"), &touches);
        }
        let touched: Vec<u64> = outcome.touched.iter().map(|&(r, _)| starts[r]).collect();
        self.init_kernel(
            op,
            &name,
            &outcome.uninitialised_reads,
            &outcome.footprint,
            &touched,
        );
        if let Some(race) = &outcome.shared_race {
            self.shared_race(&name, race, op);
        }
        let threads = [launch.grid, launch.block]
            .iter()
            .flatten()
            .fold(1u64, |n, &d| n.saturating_mul(u64::from(d)));
        self.checker
            .advance(op.timeline, kernel_ns(outcome.instructions, threads));
        crate::device::printf::keep(&outcome.printf);
        for &(handle, value) in &outcome.conditional_sets {
            self.set_conditional(launch.exec, &name, handle, value);
        }
        match fault {
            None => Ok(()),
            Some(fault) => Err(self.kernel_fault(&name, fault, &snapshot, &module, op)),
        }
    }

    /// Reports the first shared-memory hazard of kernel `name` (racecheck): the launch
    /// itself succeeded, as on the GPU.
    fn shared_race(&mut self, name: &str, race: &SharedRace, op: Use) {
        let (call, seq) = calls::current_call();
        let on = self.checker.label(op.timeline).to_string();
        let SharedRace {
            hazard,
            block,
            first,
            second,
            offset,
            bytes,
            pc_text,
            count,
        } = race;
        let (earlier, later) = match hazard {
            cuda_sim_ptx::Hazard::ReadAfterWrite => ("wrote", "reads"),
            cuda_sim_ptx::Hazard::WriteAfterRead => ("read", "writes"),
            cuda_sim_ptx::Hazard::WriteAfterWrite => ("wrote", "writes"),
        };
        let more = match count {
            0 | 1 => String::new(),
            n => format!(" ({n} racing accesses in this launch)"),
        };
        self.checker.violation(
            "shared-race",
            format!(
                "kernel {name} (block {block:?}; {call} call #{seq} on {on}): {} hazard on shared memory: thread {first:?} {earlier} and thread {second:?} {later} {bytes} bytes at shared offset {offset:#x} (`{pc_text}`) with no barrier between them{more}",
                hazard.abbreviation()
            ),
        );
    }

    /// Reports what stopped kernel `name`, and returns the launch's error.
    fn kernel_fault(
        &mut self,
        name: &str,
        fault: Fault,
        snapshot: &Snapshot,
        module: &Module,
        op: Use,
    ) -> CuResult {
        let (call, seq) = calls::current_call();
        let on = self.checker.label(op.timeline).to_string();
        match fault {
            Fault::OutOfBounds {
                block,
                thread,
                addr,
                len,
                write,
                pc_text,
            } => {
                let access = if write { "writes" } else { "reads" };
                let who = format!(
                    "kernel {name} (block {block:?}, thread {thread:?}; {call} call #{seq} on {on}) {access} {len} bytes at {addr:#x} (`{pc_text}`)"
                );
                let (kind, what) = match snapshot.find(addr).map(|i| snapshot.regions[i]) {
                    Some(region)
                        if write
                            && region.read_only
                            && !region.denied
                            && addr.saturating_add(len) <= region.end =>
                    {
                        (
                            "no-access",
                            format!(
                                "{who}: the allocation at {:#x} is this process's import of its own IPC host pool's memory, which driver 580 refuses device writes to",
                                region.start
                            ),
                        )
                    }
                    Some(region) if region.denied => (
                        "no-access",
                        format!(
                            "{who}: memory at {:#x} that this device has no access to",
                            region.start
                        ),
                    ),
                    Some(region) => (
                        "out-of-bounds",
                        format!(
                            "{who}: past the end of the {}-byte allocation at {:#x}",
                            region.end - region.start,
                            region.start
                        ),
                    ),
                    None => match self.tomb_at(addr) {
                        Some(tomb) => (
                            "use-after-free",
                            format!(
                                "{who}: freed by {} (call #{}) on {}",
                                tomb.freed_by.call,
                                tomb.freed_by.seq,
                                self.checker.label(tomb.freed_by.timeline)
                            ),
                        ),
                        None => (
                            "out-of-bounds",
                            format!("{who}: {}", snapshot.nearest(addr)),
                        ),
                    },
                };
                self.checker.violation(kind, what);
                ILLEGAL_ADDRESS
            }
            Fault::Misaligned {
                block,
                thread,
                addr,
                len,
                write,
                pc_text,
            } => {
                let access = if write { "writes" } else { "reads" };
                self.checker.violation(
                    "misaligned",
                    format!(
                        "kernel {name} (block {block:?}, thread {thread:?}; {call} call #{seq} on {on}) {access} {len} bytes at {addr:#x}, not a multiple of {len} (`{pc_text}`)"
                    ),
                );
                MISALIGNED_ADDRESS
            }
            Fault::Assert {
                block,
                thread,
                message,
            } => {
                eprintln!(
                    "cuda-sim: kernel {name} failed an assertion in block {block:?}, thread {thread:?} ({call} call #{seq}): {message}"
                );
                ASSERT
            }
            Fault::NotSupported(what) => {
                eprintln!(
                    "cuda-sim: kernel {name} ({call} call #{seq}) uses {what}, which the simulator does not support"
                );
                NOT_SUPPORTED
            }
            Fault::Trap {
                block,
                thread,
                pc_text,
            } => {
                self.checker.violation(
                    "device-exception",
                    format!(
                        "kernel {name} (block {block:?}, thread {thread:?}; {call} call #{seq} on {on}) raised a hardware exception: `{pc_text}`; the launch fails with CUDA_ERROR_LAUNCH_FAILED"
                    ),
                );
                LAUNCH_FAILED
            }
            Fault::BarrierDivergence {
                block,
                thread,
                pc_text,
                detail,
            } => {
                self.checker.violation(
                    "barrier-divergence",
                    format!(
                        "kernel {name} (block {block:?}, thread {thread:?}; {call} call #{seq} on {on}) waits at `{pc_text}`, which not every thread of its block reaches: {detail}"
                    ),
                );
                LAUNCH_FAILED
            }
            Fault::BadWarpMask {
                block,
                thread,
                mask,
                detail,
                pc_text,
            } => {
                self.checker.violation(
                    "bad-warp-mask",
                    format!(
                        "kernel {name} (block {block:?}, thread {thread:?}; {call} call #{seq} on {on}) runs `{pc_text}` with member mask {mask:#010x}, but {detail}"
                    ),
                );
                LAUNCH_FAILED
            }
            Fault::Deadlock(what) => {
                let _ = module;
                eprintln!("cuda-sim: kernel {name} cannot finish ({call} call #{seq}): {what}");
                LAUNCH_FAILED
            }
        }
    }

    /// The host synchronised with device work: pool memory above the release thresholds is
    /// given back, and device `printf` output so far goes to stdout.
    pub fn host_synchronised(&mut self) {
        self.release_pool_memory();
        crate::device::printf::flush();
    }
}
