//! Node-local packet memory: one anonymous mapping per worker, bound to the worker's NUMA node
//! with `mbind(MPOL_BIND)` and faulted in before it is registered with io_uring.
//!
//! The order matters: bind first, then populate, then register, because registration pins the
//! pages wherever they are. Hugepages are tried when asked for and fall back to normal pages;
//! [`Arena::placement`] says afterwards where the pages really are (see `placement`).
//!
//! Population is the largest start-up cost: faulting in a sink queue's 34 MiB of receive
//! buffers took 14 ms on an idle 2-core VM, serialised across queues on the process's
//! `mmap_lock`, and far longer under memory pressure. Memory the kernel only writes into
//! (provided receive buffers, never pinned) can therefore be populated sparsely: a head region
//! in full, then only the first page of each buffer, where headers and small datagrams land.
//! The rest faults in on first use, still on the bound node, because the policy is the mapping's.
//! This module and `ring` are the only places with `unsafe`.

pub(crate) mod limits;
pub(crate) mod numa;
pub(crate) mod placement;

use std::{collections::BTreeMap, io, ptr::NonNull};

pub(crate) use self::placement::{HugePages, MemoryPlacement, PageCounts};

/// Page size assumed for population and placement checks.
pub(crate) const PAGE_SIZE: usize = 4096;
const HUGE_PAGE_SIZE: usize = 2 << 20;
/// `MADV_POPULATE_WRITE` (Linux 5.14); not in every libc.
const MADV_POPULATE_WRITE: libc::c_int = 23;
/// Pages asked about per `move_pages` call when counting where an arena's pages are.
const QUERY_CHUNK: usize = 512;

/// Why an arena could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArenaError {
    /// `mmap` failed.
    #[error("cannot map {len} bytes of packet memory: {source}")]
    Map {
        /// Requested length.
        len: usize,
        /// OS error.
        source: io::Error,
    },
    /// `mbind` refused the node.
    #[error(
        "cannot bind packet memory to NUMA node {node}: {source}; check `ringblast topo` for the nodes that exist"
    )]
    Bind {
        /// Requested node.
        node: u32,
        /// OS error.
        source: io::Error,
    },
}

/// How much of an arena is faulted in before it is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Populate {
    /// Every page (memory that will be pinned by registration, or read by the kernel).
    All,
    /// The first `head` bytes, then `touch` bytes at the start of every `stride` bytes after.
    Strided {
        /// Bytes at the start populated in full.
        head: usize,
        /// Distance between the starts of two buffers.
        stride: usize,
        /// Bytes populated at the start of each buffer.
        touch: usize,
    },
}

/// A page-aligned, node-bound, populated region owned by one worker.
#[derive(Debug)]
pub(crate) struct Arena {
    base: NonNull<u8>,
    len: usize,
    node: u32,
    hugepages: HugePages,
}

impl Arena {
    /// Maps `len` bytes (rounded up to whole pages), binds them to `node` and faults them in.
    ///
    /// With `hugepages`, 2 MiB pages are tried first; if none are available the arena uses
    /// normal pages, which `hugepages` reports as [`HugePages::FellBack`].
    pub(crate) fn allocate_on_node(
        len: usize,
        node: u32,
        hugepages: bool,
    ) -> Result<Arena, ArenaError> {
        Self::allocate_on_node_with(len, node, hugepages, Populate::All)
    }

    /// Like [`Arena::allocate_on_node`], faulting in only what `populate` asks for.
    pub(crate) fn allocate_on_node_with(
        len: usize,
        node: u32,
        hugepages: bool,
        populate: Populate,
    ) -> Result<Arena, ArenaError> {
        let huge = hugepages.then(|| map(len, true)).and_then(Result::ok);
        let (base, len, hugepages) = match (huge, hugepages) {
            (Some((base, mapped)), _) => (base, mapped, HugePages::Used),
            (None, requested) => {
                let (base, mapped) =
                    map(len, false).map_err(|source| ArenaError::Map { len, source })?;
                let fell_back = if requested {
                    HugePages::FellBack
                } else {
                    HugePages::NotRequested
                };
                (base, mapped, fell_back)
            }
        };
        let arena = Arena {
            base,
            len,
            node,
            hugepages,
        };
        // SAFETY: `base..base+len` is the page-aligned mapping created just above and owned by
        // `arena`; on error `arena` is dropped, which unmaps it.
        unsafe { numa::bind_to_node(arena.base.as_ptr(), arena.len, node) }
            .map_err(|source| ArenaError::Bind { node, source })?;
        match populate {
            Populate::All => arena.populate(),
            Populate::Strided {
                head,
                stride,
                touch,
            } => {
                if arena.hugepages != HugePages::Used {
                    arena.keep_small_pages();
                }
                arena.touch(0, head);
                let mut start = head;
                while start < arena.len && stride > 0 {
                    arena.touch(start, touch);
                    start += stride;
                }
            }
        }
        Ok(arena)
    }

    /// Asks for small pages only (`MADV_NOHUGEPAGE`), so that touching one byte faults in one
    /// 4 KiB page. Without it, a kernel whose transparent hugepages are `always` (Debian 12's
    /// default) faults in a whole 2 MiB page per touch and a sparse population becomes a full
    /// one: the lab's 6.1 guest found a sink queue's arena fully resident. Advice only: if the
    /// kernel refuses it, the population is merely denser.
    fn keep_small_pages(&self) {
        // SAFETY: the range is our own private mapping; the advice changes no contents.
        unsafe { libc::madvise(self.base.as_ptr().cast(), self.len, libc::MADV_NOHUGEPAGE) };
    }

    fn populate(&self) {
        // SAFETY: the range is our own private writable mapping.
        let rc = unsafe { libc::madvise(self.base.as_ptr().cast(), self.len, MADV_POPULATE_WRITE) };
        if rc != 0 {
            // Kernels before 5.14: touch one byte per page so each is faulted in under the policy.
            self.touch(0, self.len);
        }
    }

    /// Faults in every page that bytes `offset..offset+len` (clamped to the arena) touch, by
    /// writing a zero to it: the mapping is fresh, so the bytes are zero already.
    fn touch(&self, offset: usize, len: usize) {
        let end = offset.saturating_add(len).min(self.len);
        let mut page = offset / PAGE_SIZE * PAGE_SIZE;
        while page < end {
            // SAFETY: `page < end <= len`, so the write stays inside the mapping, which nothing
            // else uses yet (the arena is not registered or shared before it is returned).
            unsafe { self.base.as_ptr().add(page).write_volatile(0) };
            page += PAGE_SIZE;
        }
    }

    #[cfg(test)]
    /// Pages of the region that are resident (faulted in), counted with `mincore`.
    pub(crate) fn resident_pages(&self) -> io::Result<usize> {
        let mut vec = vec![0u8; self.len.div_ceil(PAGE_SIZE)];
        // SAFETY: the range is our page-aligned mapping; `vec` has one byte per page.
        let rc = unsafe { libc::mincore(self.base.as_ptr().cast(), self.len, vec.as_mut_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vec.iter().filter(|b| **b & 1 != 0).count())
    }

    /// Start of the region.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Length in bytes (whole pages).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes per page of the region: 2 MiB with hugepages, 4 KiB otherwise.
    pub(crate) fn page_size(&self) -> usize {
        if self.hugepages == HugePages::Used {
            HUGE_PAGE_SIZE
        } else {
            PAGE_SIZE
        }
    }

    /// Bytes `offset..offset+len` of the region, or `None` when out of range.
    pub(crate) fn bytes(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: the range is inside the mapping, which lives as long as `self`.
        Some(unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(offset), len) })
    }

    /// Mutable bytes `offset..offset+len` of the region, or `None` when out of range.
    pub(crate) fn bytes_mut(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: the range is inside the mapping and `&mut self` makes this the only borrow.
        Some(unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(offset), len) })
    }

    /// Where every page of the region is, counted with `move_pages` in query mode (no nodes
    /// given, so nothing moves). A page never faulted in (`-ENOENT`) or still mapped to the
    /// shared zero page (`-EFAULT`: read, never written) holds none of the region's memory and
    /// counts as not resident, as `/proc/PID/numa_maps` leaves both out; any other status is
    /// an error.
    pub(crate) fn page_nodes(&self) -> io::Result<PageCounts> {
        let page = self.page_size();
        let pages = self.len / page;
        let mut by_node = BTreeMap::new();
        let mut not_resident = 0;
        let mut addrs = [std::ptr::null::<u8>(); QUERY_CHUNK];
        let mut status: [libc::c_int; QUERY_CHUNK] = [0; QUERY_CHUNK];
        for first in (0..pages).step_by(QUERY_CHUNK) {
            let n = QUERY_CHUNK.min(pages - first);
            for (i, addr) in addrs[..n].iter_mut().enumerate() {
                *addr = self
                    .base
                    .as_ptr()
                    .wrapping_add((first + i) * page)
                    .cast_const();
            }
            // SAFETY: every address is the start of a page inside this arena's mapping, which
            // lives as long as `self`; the slices have equal lengths.
            unsafe { numa::nodes_of_pages(&addrs[..n], &mut status[..n]) }?;
            for (i, &s) in status[..n].iter().enumerate() {
                match u32::try_from(s) {
                    Ok(node) => *by_node.entry(node).or_insert(0) += 1,
                    Err(_) if s == -libc::ENOENT || s == -libc::EFAULT => not_resident += 1,
                    Err(_) => {
                        return Err(io::Error::other(format!(
                            "page {} of the arena: {}",
                            first + i,
                            io::Error::from_raw_os_error(-s)
                        )));
                    }
                }
            }
        }
        Ok(PageCounts {
            by_node,
            not_resident,
        })
    }

    /// Where the region is: its bound node, its pages per node (or why they are unknown), its
    /// page size and whether hugepages were asked for and used.
    pub(crate) fn placement(&self) -> MemoryPlacement {
        MemoryPlacement {
            bound_node: self.node,
            page_size: self.page_size(),
            hugepages: self.hugepages,
            pages: self.page_nodes().map_err(|e| format!("move_pages: {e}")),
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: `base..base+len` is the mapping this arena created and nothing else unmaps it.
        // Rings that point into it are dropped first (see `ring::Engine`'s field order).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

fn map(len: usize, huge: bool) -> io::Result<(NonNull<u8>, usize)> {
    let unit = if huge { HUGE_PAGE_SIZE } else { PAGE_SIZE };
    let len = len.max(1).div_ceil(unit) * unit;
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    if huge {
        flags |= libc::MAP_HUGETLB;
    }
    // SAFETY: an anonymous private mapping with no address hint has no preconditions.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast())
        .map(|p| (p, len))
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `HugePages_Free` of /proc/meminfo.
    fn free_hugepages() -> u64 {
        std::fs::read_to_string("/proc/meminfo")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("HugePages_Free:"))
            .map(|v| v.trim().parse().unwrap())
            .unwrap()
    }

    #[test]
    fn every_page_of_a_populated_arena_is_on_its_node() {
        let arena = Arena::allocate_on_node(8 << 20, 0, false).unwrap();
        assert_eq!(arena.len(), 8 << 20);
        let pages = arena.page_nodes().unwrap();
        assert_eq!(
            pages.by_node,
            BTreeMap::from([(0, (8 << 20) / PAGE_SIZE as u64)])
        );
        assert_eq!(pages.not_resident, 0);
        let placement = arena.placement();
        assert_eq!(placement.bound_node, 0);
        assert_eq!(placement.page_size, PAGE_SIZE);
        assert_eq!(placement.hugepages, HugePages::NotRequested);
        assert_eq!(placement.all_on_node(), Some(true));
    }

    #[test]
    fn strided_population_faults_in_only_the_head_and_each_buffer_start() {
        let stride = 65_644;
        let len = 2 * PAGE_SIZE + 64 * stride;
        let populate = Populate::Strided {
            head: 2 * PAGE_SIZE,
            stride,
            touch: 512,
        };
        let arena = Arena::allocate_on_node_with(len, 0, false, populate).unwrap();
        let resident = arena.resident_pages().unwrap();
        // Two head pages, then one or two pages per buffer (a start near a page end spills).
        assert!((2 + 64..=2 + 128).contains(&resident), "{resident}");
        let full = Arena::allocate_on_node(len, 0, false).unwrap();
        assert_eq!(full.resident_pages().unwrap(), full.len() / PAGE_SIZE);
        // move_pages agrees with mincore: the resident pages on node 0, the rest not resident.
        let pages = arena.page_nodes().unwrap();
        assert_eq!(pages.by_node, BTreeMap::from([(0, resident as u64)]));
        assert_eq!(
            pages.not_resident,
            (arena.len() / PAGE_SIZE - resident) as u64
        );
        assert_eq!(arena.placement().all_on_node(), Some(true));
    }

    #[test]
    fn a_page_only_read_is_not_resident() {
        let populate = Populate::Strided {
            head: PAGE_SIZE,
            stride: 4 * PAGE_SIZE,
            touch: 0,
        };
        let arena = Arena::allocate_on_node_with(4 * PAGE_SIZE, 0, false, populate).unwrap();
        let before = arena.page_nodes().unwrap();
        assert_eq!(before.by_node, BTreeMap::from([(0, 1)]));
        assert_eq!(before.not_resident, 3);
        // A read fault maps the shared zero page, which holds none of the arena's memory.
        std::hint::black_box(arena.bytes(2 * PAGE_SIZE, 1).unwrap()[0]);
        assert_eq!(arena.page_nodes().unwrap(), before);
    }

    #[test]
    fn missing_node_is_a_clear_error() {
        let err = Arena::allocate_on_node(1 << 20, 63, false).unwrap_err();
        assert!(err.to_string().contains("NUMA node 63"), "{err}");
    }

    #[test]
    fn hugepages_fall_back_when_none_are_free() {
        let free = free_hugepages();
        let arena = Arena::allocate_on_node(3 << 20, 0, true).unwrap();
        assert!(arena.len() >= 3 << 20);
        let placement = arena.placement();
        match placement.hugepages {
            HugePages::Used => assert!(free > 0 && placement.page_size == HUGE_PAGE_SIZE),
            HugePages::FellBack => assert_eq!(placement.page_size, PAGE_SIZE),
            HugePages::NotRequested => panic!("hugepages were requested"),
        }
        let pages = placement.pages.unwrap();
        assert_eq!(pages.by_node.keys().collect::<Vec<_>>(), vec![&0]);
        assert_eq!(
            pages.by_node[&0] + pages.not_resident,
            (arena.len() / placement.page_size) as u64
        );
        if free == 0 {
            assert_eq!(placement.hugepages, HugePages::FellBack);
        }
    }

    #[test]
    fn bytes_are_bounds_checked() {
        let mut arena = Arena::allocate_on_node(PAGE_SIZE, 0, false).unwrap();
        assert!(arena.bytes(PAGE_SIZE - 1, 2).is_none());
        arena
            .bytes_mut(10, 4)
            .unwrap()
            .copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(arena.bytes(10, 4).unwrap(), &[1, 2, 3, 4]);
        assert!(arena.bytes(usize::MAX, 2).is_none());
    }
}
