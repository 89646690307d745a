//! What users tune on a pool: the release threshold, the reuse policies, the memory figures and
//! their high-water marks, and which pool is a device's current one.
//!
//! **The current pool stays alive.** `cuMemAllocAsync` allocates from the device's current
//! pool, so a pool made current through [`MemoryPoolHandle::set_device_current`] is kept alive
//! by a process-wide table until another pool replaces it: dropping the program's last handle
//! cannot destroy the pool `cuMemAllocAsync` would then use.
//!
//! **One resolution of the current pool.** [`MemoryPoolHandle::device_current`] (and so
//! `DevicePtrHandle::alloc_async`) reads the device's current pool under the same lock that
//! `set_device_current` holds while it replaces it, and returns the handle that manages it:
//! a pool being replaced is either still in the table or already resolved to a strong handle,
//! so no thread can hold its raw value after it is destroyed.

use std::sync::Mutex;

use cudarc::driver::sys::CUmemPool_attribute as Attribute;

use crate::driver::call::{driver, out};
use crate::driver::load;
use crate::error::{Error, Result};
use crate::memory::pool::MemoryPoolHandle;
use crate::sync::lock;

/// The reuse policies of a pool (`CU_MEMPOOL_ATTR_REUSE_*`), all on by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReusePolicy {
    /// Reuse memory freed on another stream once the free's event dependencies are met.
    pub follow_event_dependencies: bool,
    /// Reuse memory whose free has completed, without a dependency.
    pub allow_opportunistic: bool,
    /// Insert dependencies so that memory freed on another stream can be reused.
    pub allow_internal_dependencies: bool,
}

/// A pool's memory figures, in bytes (`CU_MEMPOOL_ATTR_{RESERVED,USED}_MEM_{CURRENT,HIGH}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolUsage {
    /// Reserved from the device now.
    pub reserved: u64,
    /// The most reserved since creation or the last reset.
    pub reserved_high: u64,
    /// Allocated to the program now.
    pub used: u64,
    /// The most allocated since creation or the last reset.
    pub used_high: u64,
}

/// Per device ordinal, the pool this crate made current (kept alive while it is).
static CURRENT: Mutex<Vec<Option<MemoryPoolHandle>>> = Mutex::new(Vec::new());

impl MemoryPoolHandle {
    /// The bytes of freed memory the pool keeps reserved at a synchronisation instead of
    /// releasing them to the device (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`; 0 by default).
    pub fn release_threshold(&self) -> Result<u64> {
        self.attribute(Attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
    }

    /// Sets the release threshold (`u64::MAX` keeps everything reserved).
    pub fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        self.set_u64(Attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, bytes)
    }

    /// The pool's reuse policies.
    pub fn reuse_policy(&self) -> Result<ReusePolicy> {
        Ok(ReusePolicy {
            follow_event_dependencies: self
                .get_flag(Attribute::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES)?,
            allow_opportunistic: self
                .get_flag(Attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC)?,
            allow_internal_dependencies: self
                .get_flag(Attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)?,
        })
    }

    /// Sets the pool's reuse policies. Reuse never breaks the ordering of this crate's frees:
    /// the driver reuses memory only once its free is ordered before the new allocation.
    pub fn set_reuse_policy(&self, policy: ReusePolicy) -> Result<()> {
        self.set_flag(
            Attribute::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
            policy.follow_event_dependencies,
        )?;
        self.set_flag(
            Attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
            policy.allow_opportunistic,
        )?;
        self.set_flag(
            Attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
            policy.allow_internal_dependencies,
        )
    }

    /// The pool's memory figures and their high-water marks.
    pub fn usage(&self) -> Result<PoolUsage> {
        Ok(PoolUsage {
            reserved: self.attribute(Attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            reserved_high: self.attribute(Attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
            used: self.attribute(Attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            used_high: self.attribute(Attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
        })
    }

    /// Resets both high-water marks to the current figures.
    pub fn reset_high_watermarks(&self) -> Result<()> {
        self.set_u64(Attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)?;
        self.set_u64(Attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)
    }

    /// Makes this pool device `ordinal`'s current pool (`cuDeviceSetMemPool`), the one
    /// `DevicePtrHandle::alloc_async` allocates from, and returns the pool that was current:
    /// the handle that manages it if this program has one, else a reference. The pool is kept
    /// alive while it is current (see the module docs). Only pools located on that device
    /// can be made its current pool.
    pub fn set_device_current(&self, ordinal: usize) -> Result<MemoryPoolHandle> {
        let device = load::device(ordinal)?;
        if self.owning_device() != Some(ordinal) {
            return Err(Error::WrongDevice {
                what: "a device's current pool",
                expected: ordinal,
                found: self.owning_device(),
            });
        }
        let mut current = lock(&CURRENT);
        let previous = MemoryPoolHandle::current_unlocked(ordinal)?;
        // SAFETY: the pool and the device are valid.
        unsafe { driver!(cuDeviceSetMemPool(device, self.as_cu())) }?;
        if current.len() <= ordinal {
            current.resize(ordinal + 1, None);
        }
        // Only a pool this program owns needs keeping; a reference (the device's default
        // pool) lives as long as the driver.
        let keep = self.is_owning().then(|| self.clone());
        let replaced = std::mem::replace(&mut current[ordinal], keep);
        drop(current);
        // The replaced pool may be dropped here, outside the lock: its own handles (and its
        // pointers, which keep it) decide when it goes.
        drop(replaced);
        Ok(previous)
    }

    /// Device `ordinal`'s current pool (`cuDeviceGetMemPool`), the one `cuMemAllocAsync` uses:
    /// the handle that manages it if this program has one, which keeps it alive however the
    /// current pool changes afterwards, else a reference (the device's default pool, which
    /// lives as long as the driver). Resolved under the lock that
    /// [`MemoryPoolHandle::set_device_current`] takes.
    pub fn device_current(ordinal: usize) -> Result<MemoryPoolHandle> {
        let _current = lock(&CURRENT);
        Self::current_unlocked(ordinal)
    }

    /// [`Self::device_current`] with the lock held by the caller.
    fn current_unlocked(ordinal: usize) -> Result<MemoryPoolHandle> {
        let current = MemoryPoolHandle::device_pool(ordinal, |device| {
            // SAFETY: `raw` is a valid out-pointer and `device` a valid device.
            out(|raw| unsafe { driver!(cuDeviceGetMemPool(raw, device)) })
        })?;
        Ok(MemoryPoolHandle::lookup(current.as_cu()).unwrap_or(current))
    }

    fn set_u64(&self, attribute: Attribute, value: u64) -> Result<()> {
        let mut value = value;
        // SAFETY: the pool is alive; these attributes are 64-bit values, read by the call.
        unsafe {
            driver!(cuMemPoolSetAttribute(
                self.as_cu(),
                attribute,
                (&mut value as *mut u64).cast()
            ))
        }
    }

    fn get_flag(&self, attribute: Attribute) -> Result<bool> {
        // SAFETY: the pool is alive; the reuse attributes are `int` values.
        let value = out(|value: &mut i32| unsafe {
            driver!(cuMemPoolGetAttribute(
                self.as_cu(),
                attribute,
                (value as *mut i32).cast()
            ))
        })?;
        Ok(value != 0)
    }

    fn set_flag(&self, attribute: Attribute, enabled: bool) -> Result<()> {
        let mut value = i32::from(enabled);
        // SAFETY: the pool is alive; the reuse attributes are `int` values, read by the call.
        unsafe {
            driver!(cuMemPoolSetAttribute(
                self.as_cu(),
                attribute,
                (&mut value as *mut i32).cast()
            ))
        }
    }
}
