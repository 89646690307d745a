//! The tensor memory accelerator and its barriers: `cp.async.bulk.tensor` (tile mode, global
//! to shared completing an mbarrier's transactions, and shared to global), and
//! `mbarrier.init/arrive[.expect_tx]/try_wait.parity`.
//!
//! * A tensor map is the 128 bytes of a `CUtensorMap` kernel parameter, in the simulated
//!   driver's own encoding ([`TensorMapDesc::encode`]; `cuTensorMapEncodeTiled` and
//!   `cuTensorMapEncodeIm2col` of the simulator write it). Bytes that do not decode are a
//!   fault (`NotSupported`), and so are im2col and interleaved maps: only tile-mode copies
//!   are interpreted.
//! * Copies are performed when they are issued, element by element with every global run
//!   checked by `Memory::check` like any access: a load fills elements outside the tensor's
//!   dimensions with zeros (or NaN), a store skips them. Swizzled maps and element strides
//!   other than 1 are refused as `NotSupported`. `commit_group` and `wait_group` have nothing
//!   left to wait for.
//! * An mbarrier is the 64-bit shared word the kernel declares, in this encoding: pending
//!   arrivals (bits 0-20), expected arrivals (21-41), the pending transaction bytes as a
//!   signed 21-bit count (42-62), the phase's parity (63). A phase completes when no arrival
//!   and no transaction byte is pending; then the pending count is reset and the parity flips.
//!   A `try_wait` that finds its phase incomplete yields to the other threads of the block.

use crate::Fault;
use crate::exec::{Thread, W};
use crate::ir::{Space, TensorSite};
use crate::memory::{host_load, host_store, rd_bytes, wr_bytes};

/// The first word of an encoded tensor map.
const MAGIC: u32 = 0x544d_5353;

/// A tensor map as the simulated driver encodes it (tiled, or im2col).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TensorMapDesc {
    /// `CUtensorMapDataType`.
    pub data_type: u8,
    /// Bytes per element.
    pub element_bytes: u8,
    /// Dimensions used (1 to 5).
    pub rank: u8,
    /// `CUtensorMapSwizzle`.
    pub swizzle: u8,
    /// Fill loads outside the tensor with NaN instead of zeros.
    pub nan_fill: bool,
    /// The tensor's global address.
    pub address: u64,
    /// Elements per dimension (innermost first).
    pub dims: [u64; 5],
    /// Bytes between indices of dimensions 1 and up (`strides[0]` is dimension 1's).
    pub strides: [u64; 4],
    /// The box, in elements per dimension; in an im2col map, `[channels per pixel, pixels
    /// per column, 0, 0, 0]`.
    pub box_dims: [u32; 5],
    /// Traversal strides.
    pub element_strides: [u32; 5],
    /// An im2col map (`cuTensorMapEncodeIm2col`), not a tiled one.
    pub im2col: bool,
    /// `CUtensorMapInterleave`.
    pub interleave: u8,
    /// An im2col map's bounding-box lower corner (W, H, D; rank - 2 used).
    pub lower_corner: [i16; 3],
    /// An im2col map's bounding-box upper corner (W, H, D; rank - 2 used).
    pub upper_corner: [i16; 3],
}

impl TensorMapDesc {
    /// The 128 bytes of a `CUtensorMap` holding this description.
    pub fn encode(&self) -> [u8; 128] {
        let mut b = [0u8; 128];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = self.data_type;
        b[5] = self.element_bytes;
        b[6] = self.rank;
        b[7] = self.swizzle;
        b[8..16].copy_from_slice(&self.address.to_le_bytes());
        for i in 0..5 {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&self.dims[i].to_le_bytes());
            b[88 + 4 * i..92 + 4 * i].copy_from_slice(&self.box_dims[i].to_le_bytes());
            b[108 + i] = self.element_strides[i] as u8;
        }
        for i in 0..4 {
            b[56 + 8 * i..64 + 8 * i].copy_from_slice(&self.strides[i].to_le_bytes());
        }
        b[113] = self.nan_fill as u8;
        b[114] = self.im2col as u8;
        b[115] = self.interleave;
        for i in 0..3 {
            b[116 + 2 * i..118 + 2 * i].copy_from_slice(&self.lower_corner[i].to_le_bytes());
            b[122 + 2 * i..124 + 2 * i].copy_from_slice(&self.upper_corner[i].to_le_bytes());
        }
        b
    }

    /// The description in `b`, if it is one [`Self::encode`] wrote.
    pub fn decode(b: &[u8; 128]) -> Option<TensorMapDesc> {
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
        if u32_at(0) != MAGIC || !(1..=5).contains(&b[6]) || b[5] == 0 {
            return None;
        }
        let mut d = TensorMapDesc {
            data_type: b[4],
            element_bytes: b[5],
            rank: b[6],
            swizzle: b[7],
            nan_fill: b[113] != 0,
            im2col: b[114] != 0,
            interleave: b[115],
            address: u64_at(8),
            ..TensorMapDesc::default()
        };
        for i in 0..5 {
            d.dims[i] = u64_at(16 + 8 * i);
            d.box_dims[i] = u32_at(88 + 4 * i);
            d.element_strides[i] = u32::from(b[108 + i]);
        }
        for i in 0..4 {
            d.strides[i] = u64_at(56 + 8 * i);
        }
        let i16_at = |at: usize| i16::from_le_bytes([b[at], b[at + 1]]);
        for i in 0..3 {
            d.lower_corner[i] = i16_at(116 + 2 * i);
            d.upper_corner[i] = i16_at(122 + 2 * i);
        }
        Some(d)
    }
}

const COUNT_BITS: u32 = 21;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// An mbarrier word, unpacked.
#[derive(Clone, Copy)]
struct Mbar {
    pending: u64,
    expected: u64,
    tx: i64,
    phase: u64,
}

impl Mbar {
    fn unpack(v: u64) -> Mbar {
        let raw_tx = (v >> (2 * COUNT_BITS)) & COUNT_MASK;
        // Sign-extend the 21-bit transaction count.
        let tx = ((raw_tx << (64 - COUNT_BITS)) as i64) >> (64 - COUNT_BITS);
        Mbar {
            pending: v & COUNT_MASK,
            expected: (v >> COUNT_BITS) & COUNT_MASK,
            tx,
            phase: v >> 63,
        }
    }

    fn pack(self) -> u64 {
        (self.pending & COUNT_MASK)
            | ((self.expected & COUNT_MASK) << COUNT_BITS)
            | (((self.tx as u64) & COUNT_MASK) << (2 * COUNT_BITS))
            | (self.phase << 63)
    }

    /// Completes the phase when nothing is pending.
    fn settle(mut self) -> Mbar {
        if self.pending == 0 && self.tx == 0 {
            self.phase ^= 1;
            self.pending = self.expected;
        }
        self
    }
}

impl<'m> W<'m> {
    /// The shared-memory offset of the 8-byte mbarrier at `addr`.
    fn mbar_at(
        &mut self,
        th: &Thread,
        shared: &[u8],
        addr: u64,
        write: bool,
    ) -> Result<usize, Fault> {
        match self.locate(th, shared.len(), Space::Shared, addr, 8, 8, write)? {
            crate::exec::Loc::Shared(o) => Ok(o),
            _ => Err(self.fault_oob(th, addr, 8, write)),
        }
    }

    pub(crate) fn mbar_init(
        &mut self,
        th: &Thread,
        shared: &mut [u8],
        addr: u64,
        count: u64,
    ) -> Result<(), Fault> {
        let o = self.mbar_at(th, shared, addr, true)?;
        if count == 0 || count > COUNT_MASK {
            return Err(Fault::NotSupported(format!(
                "mbarrier.init with a count of {count}"
            )));
        }
        let bar = Mbar {
            pending: count,
            expected: count,
            tx: 0,
            phase: 0,
        };
        wr_bytes(shared, o, 8, bar.pack());
        Ok(())
    }

    /// One arrival, after raising the transaction count by `tx`; returns the state before.
    pub(crate) fn mbar_arrive(
        &mut self,
        th: &Thread,
        shared: &mut [u8],
        addr: u64,
        tx: u64,
    ) -> Result<u64, Fault> {
        let o = self.mbar_at(th, shared, addr, true)?;
        let before = rd_bytes(shared, o, 8);
        let mut bar = Mbar::unpack(before);
        if bar.pending == 0 {
            return Err(Fault::NotSupported(
                "mbarrier.arrive on a barrier with no pending arrival (not initialised?)".into(),
            ));
        }
        bar.tx += tx as u32 as i64;
        bar.pending -= 1;
        wr_bytes(shared, o, 8, bar.settle().pack());
        Ok(before)
    }

    /// Whether the phase of parity `parity` has completed.
    pub(crate) fn mbar_test(
        &mut self,
        th: &Thread,
        shared: &[u8],
        addr: u64,
        parity: u64,
    ) -> Result<bool, Fault> {
        let o = self.mbar_at(th, shared, addr, false)?;
        Ok(Mbar::unpack(rd_bytes(shared, o, 8)).phase != parity & 1)
    }

    /// The tensor map at generic address `addr` (a kernel parameter, or global memory).
    fn tensor_map(
        &mut self,
        th: &Thread,
        shared: &[u8],
        addr: u64,
    ) -> Result<TensorMapDesc, Fault> {
        let mut bytes = [0u8; 128];
        match self.locate(th, shared.len(), Space::Generic, addr, 128, 64, false)? {
            crate::exec::Loc::KParam(o) => bytes.copy_from_slice(&self.args.params[o..o + 128]),
            crate::exec::Loc::Host(a) => {
                for (k, chunk) in bytes.chunks_exact_mut(8).enumerate() {
                    chunk.copy_from_slice(&host_load(a + 8 * k as u64, 8).to_le_bytes());
                }
            }
            _ => return Err(self.fault_oob(th, addr, 128, false)),
        }
        let desc = TensorMapDesc::decode(&bytes).ok_or_else(|| {
            Fault::NotSupported(format!(
                "a tensor map at {addr:#x} that this simulator's cuTensorMapEncode* did not encode"
            ))
        })?;
        if desc.im2col || desc.interleave != 0 {
            return Err(Fault::NotSupported(
                "an im2col or interleaved tensor map (only tile-mode copies of unswizzled, \
                 uninterleaved maps are interpreted)"
                    .into(),
            ));
        }
        if desc.swizzle != 0
            || desc.element_strides[..desc.rank as usize]
                .iter()
                .any(|&s| s != 1)
        {
            return Err(Fault::NotSupported(
                "a swizzled tensor map, or element strides other than 1".into(),
            ));
        }
        Ok(desc)
    }

    /// Performs the `cp.async.bulk.tensor` of `site` with the thread's registers.
    pub(crate) fn tensor_copy(
        &mut self,
        th: &Thread,
        shared: &mut [u8],
        site: &TensorSite,
    ) -> Result<(), Fault> {
        let regs = &th.regs;
        let desc = self.tensor_map(th, shared, regs[site.map as usize])?;
        let rank = desc.rank as usize;
        if site.coords.len() != rank {
            return Err(Fault::NotSupported(format!(
                "a {}-d copy through a rank-{rank} tensor map",
                site.coords.len()
            )));
        }
        let mut coords = [0i64; 5];
        for (k, &r) in site.coords.iter().enumerate() {
            coords[k] = regs[r as usize] as u32 as i32 as i64;
        }
        let element = u64::from(desc.element_bytes);
        let box_dims: Vec<u64> = (0..5)
            .map(|k| {
                if k < rank {
                    u64::from(desc.box_dims[k])
                } else {
                    1
                }
            })
            .collect();
        let box_elements: u64 = box_dims.iter().product();
        let box_bytes = box_elements * element;
        let shared_addr = regs[site.shared as usize];
        let base = match self.locate(
            th,
            shared.len(),
            Space::Shared,
            shared_addr,
            box_bytes,
            16,
            site.load,
        )? {
            crate::exec::Loc::Shared(o) => o,
            _ => return Err(self.fault_oob(th, shared_addr, box_bytes, site.load)),
        };
        let fill = match (desc.nan_fill, element) {
            (true, 4) => 0x7fff_ffff,
            (true, 8) => 0x7fff_ffff_ffff_ffff,
            _ => 0,
        };
        let mut row = 0usize;
        for b4 in 0..box_dims[4] {
            for b3 in 0..box_dims[3] {
                for b2 in 0..box_dims[2] {
                    for b1 in 0..box_dims[1] {
                        let outer = [b1, b2, b3, b4];
                        // The row's coordinates in dimensions 1 and up, and whether they lie
                        // inside the tensor.
                        let mut offset = 0u64;
                        let mut inside = true;
                        for k in 1..rank {
                            let c = coords[k] + outer[k - 1] as i64;
                            if c < 0 || c as u64 >= desc.dims[k] {
                                inside = false;
                            } else {
                                offset += c as u64 * desc.strides[k - 1];
                            }
                        }
                        let first = coords[0];
                        let lo = first.max(0);
                        let hi = (first + box_dims[0] as i64).min(desc.dims[0] as i64);
                        let row_base = base + row * (box_dims[0] * element) as usize;
                        if site.load {
                            for e in 0..box_dims[0] as usize {
                                wr_bytes(
                                    shared,
                                    row_base + e * element as usize,
                                    element as u32,
                                    fill,
                                );
                            }
                        }
                        if inside && lo < hi {
                            let start = desc.address + offset + lo as u64 * element;
                            let len = (hi - lo) as u64 * element;
                            let at = match self.locate(
                                th,
                                shared.len(),
                                Space::Global,
                                start,
                                len,
                                element,
                                !site.load,
                            )? {
                                crate::exec::Loc::Host(a) => a,
                                _ => return Err(self.fault_oob(th, start, len, !site.load)),
                            };
                            let skip = (lo - first) as usize;
                            for e in 0..(hi - lo) as usize {
                                let s = row_base + (skip + e) * element as usize;
                                let g = at + e as u64 * element;
                                if site.load {
                                    wr_bytes(
                                        shared,
                                        s,
                                        element as u32,
                                        host_load(g, element as u32),
                                    );
                                } else {
                                    host_store(
                                        g,
                                        element as u32,
                                        rd_bytes(shared, s, element as u32),
                                    );
                                }
                            }
                        }
                        row += 1;
                    }
                }
            }
        }
        if site.load {
            let o = self.mbar_at(th, shared, regs[site.mbar as usize], true)?;
            let mut bar = Mbar::unpack(rd_bytes(shared, o, 8));
            bar.tx -= box_bytes as i64;
            wr_bytes(shared, o, 8, bar.settle().pack());
        }
        Ok(())
    }
}
