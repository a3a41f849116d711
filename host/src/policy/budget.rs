//! One memory limit per instance: every linear memory and every table of
//! the instance (a component holds several core instances, and a module may
//! declare several memories) draws on the same budget.
//!
//! wasmtime's limiter hooks see one memory or table at a time; this one
//! keeps the running sum. A table element counts as a pointer's worth of
//! bytes, which is what wasmtime allocates for it.

use wasmtime::ResourceLimiter;

/// Bytes one table element costs.
pub const TABLE_ELEMENT_BYTES: u64 = std::mem::size_of::<usize>() as u64;

/// The memory budget of one instance (one store).
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    used: u64,
    /// The last growth granted, taken back when wasmtime then fails it.
    last_grant: u64,
    exceeded: bool,
}

impl MemoryBudget {
    /// A budget of `limit` bytes for all memories and tables together.
    pub fn new(limit: u64) -> MemoryBudget {
        MemoryBudget { limit, used: 0, last_grant: 0, exceeded: false }
    }

    /// Bytes granted so far.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Whether a growth was refused for the limit.
    pub fn exceeded(&self) -> bool {
        self.exceeded
    }

    /// Grants growing one memory or table from `current` to `desired`
    /// bytes when the sum stays within the limit. Refusing traps (rather
    /// than failing the grow): a guest that cannot allocate aborts anyway,
    /// and this way the error names the limit.
    fn grow(&mut self, what: &str, current: u64, desired: u64, maximum: Option<u64>) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            // wasmtime fails this growth itself; nothing to count.
            return Ok(false);
        }
        let delta = desired.saturating_sub(current);
        if self.used.saturating_add(delta) > self.limit {
            self.exceeded = true;
            wasmtime::bail!(
                "memory limit of {} bytes reached: the instance's memories and tables hold {} bytes, \
                 and a {what} asked for {delta} more",
                self.limit,
                self.used
            );
        }
        self.used += delta;
        self.last_grant = delta;
        Ok(true)
    }

    fn grow_failed(&mut self) {
        self.used -= std::mem::take(&mut self.last_grant);
    }
}

impl ResourceLimiter for MemoryBudget {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.grow("memory", current as u64, desired as u64, maximum.map(|m| m as u64))
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.grow_failed();
        Ok(())
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let bytes = |elements: usize| (elements as u64).saturating_mul(TABLE_ELEMENT_BYTES);
        self.grow("table", bytes(current), bytes(desired), maximum.map(bytes))
    }

    fn table_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.grow_failed();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn two_memories_share_one_limit() {
        let mut b = MemoryBudget::new(64 << 20);
        assert!(b.memory_growing(0, 40 * MIB, None).unwrap());
        // A second memory of the same size would pass a per-memory limit.
        assert!(b.memory_growing(0, 40 * MIB, None).is_err());
        assert!(b.exceeded());
        assert_eq!(b.used(), 40 << 20);
    }

    #[test]
    fn growth_counts_the_difference_and_tables_count_too() {
        let mut b = MemoryBudget::new(10 << 20);
        assert!(b.memory_growing(0, MIB, None).unwrap());
        assert!(b.memory_growing(MIB, 8 * MIB, None).unwrap());
        assert_eq!(b.used(), 8 << 20);
        let elements = (3 * MIB) / TABLE_ELEMENT_BYTES as usize;
        assert!(b.table_growing(0, elements, None).is_err(), "8 MiB + 3 MiB of table is over 10 MiB");
        assert!(b.table_growing(0, elements / 3, None).unwrap());
        assert_eq!(b.used(), (9 << 20) as u64);
    }

    #[test]
    fn a_growth_beyond_the_maximum_or_failed_is_not_counted() {
        let mut b = MemoryBudget::new(10 << 20);
        assert!(!b.memory_growing(0, 2 * MIB, Some(MIB)).unwrap());
        assert_eq!(b.used(), 0);
        assert!(b.memory_growing(0, 2 * MIB, None).unwrap());
        b.memory_grow_failed(wasmtime::format_err!("no memory")).unwrap();
        assert_eq!(b.used(), 0);
        assert!(!b.exceeded());
    }
}
