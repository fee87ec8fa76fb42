//! Aligned buffers and the one memory budget every in-flight buffer comes out of.
//!
//! A [`Budget`] is the job-wide limit on buffer memory. Each reader or writer takes a [`Lease`] of
//! the buffers it may hold in flight when it opens, and allocates its buffers lazily inside it.
//! Because a lease is taken whole before any of its buffers exist, a reader or writer never
//! waits for memory while holding some, so several of them sharing one budget cannot deadlock.
//! Buffers go back to their lease's free list when dropped, wherever they were dropped (a
//! writer may drop a buffer that a reader filled), and the lease's bytes go back to the budget
//! once the lease and all its buffers are gone.
#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// The job-wide memory budget for in-flight I/O buffers. Cheap to clone (shared).
#[derive(Clone)]
pub struct Budget {
    inner: Arc<BudgetInner>,
}

struct BudgetInner {
    limit: usize,
    used: Mutex<usize>,
    freed: Condvar,
    /// Leases waiting on `freed`, counted under `used`'s lock: a lease given back wakes them
    /// only when there are some (a wake costs a futex call even when nobody waits).
    waiting: AtomicUsize,
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Budget").field("limit", &self.inner.limit).field("used", &self.used()).finish()
    }
}

impl Budget {
    /// A budget of `bytes` for all buffers leased from it.
    pub fn new(bytes: usize) -> Budget {
        Budget { inner: Arc::new(BudgetInner { limit: bytes.max(1), used: Mutex::new(0), freed: Condvar::new(), waiting: AtomicUsize::new(0) }) }
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    /// Bytes currently leased.
    pub fn used(&self) -> usize {
        *self.inner.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Leases what `req` asks for, waiting while other leases hold the memory: up to
    /// `req.count` buffers, at least `req.min` (fewer than `count` when the budget is smaller
    /// than asked), and never more than the budget allows.
    ///
    /// # Panics
    /// If `size` rounded up to `align` exceeds `isize::MAX` (callers bound their request sizes
    /// well below that).
    pub fn lease(&self, req: LeaseRequest) -> Lease {
        let LeaseRequest { size, align, count, min } = req;
        let align = align.max(1).checked_next_power_of_two().unwrap_or(1 << (usize::BITS - 1));
        let size = round_up(size.max(1), align);
        if layout(size, align).is_none() {
            panic!("buffer of {size} B aligned to {align} is too large");
        }
        let fit = (self.inner.limit / size).max(1);
        let min = min.clamp(1, fit);
        let count = count.clamp(min, fit);
        let mut used = self.inner.used.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let free = self.inner.limit.saturating_sub(*used);
            let can = (free / size).min(count);
            // A lone lease always gets its minimum, even if one buffer exceeds the budget: a
            // budget smaller than one request must slow a job down, not hang it.
            if can >= min || *used == 0 {
                let n = can.max(min);
                *used += n * size;
                return Lease {
                    inner: Arc::new(LeaseInner {
                        budget: self.inner.clone(),
                        size,
                        align,
                        count: n,
                        state: Mutex::new(LeaseState { allocated: 0, free: Vec::new(), all: Vec::new(), arena: None }),
                    }),
                };
            }
            self.inner.waiting.fetch_add(1, Ordering::Relaxed);
            used = self.inner.freed.wait(used).unwrap_or_else(|e| e.into_inner());
            self.inner.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Divides this budget among the parts of a job that want `wants` bytes each, so that no
    /// part waits on memory another holds: each part gets a budget of its own of its share,
    /// and the shares are taken out of this budget together, as one lease held as long as the
    /// [`Shares`] (other users of this budget see them taken). Shares that add up to more than
    /// the budget are granted all the same (a job must slow down, not hang, on a budget smaller
    /// than its minimum); [`Shares::over`] says by how much.
    pub fn split(&self, wants: &[usize]) -> Shares {
        let want = wants.iter().fold(0usize, |a, w| a.saturating_add(*w));
        let held = self.lease(LeaseRequest::one(want.min(self.limit()).max(1)));
        Shares { _held: held, parts: wants.iter().map(|w| Budget::new(*w)).collect(), over: want.saturating_sub(self.limit()) }
    }
}

/// What a [`Budget::lease`] asks for: up to `count` buffers of `size` bytes aligned to `align`
/// (rounded up to a power of two), and at least `min` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRequest {
    /// Bytes per buffer (rounded up to the alignment).
    pub size: usize,
    /// Memory alignment of each buffer.
    pub align: usize,
    /// Buffers wanted.
    pub count: usize,
    /// Buffers needed: the lease waits until this many fit.
    pub min: usize,
}

impl LeaseRequest {
    /// Up to `count` buffers of `size` bytes, byte-aligned, at least one.
    pub fn buffers(size: usize, count: usize) -> LeaseRequest {
        LeaseRequest { size, align: 1, count, min: 1 }
    }

    /// One span of `size` bytes (a share of the budget held as a whole).
    pub fn one(size: usize) -> LeaseRequest {
        LeaseRequest::buffers(size, 1)
    }

    /// The same, each buffer aligned to `align`.
    pub fn aligned(self, align: usize) -> LeaseRequest {
        LeaseRequest { align, ..self }
    }

    /// The same, waiting for at least `min` buffers.
    pub fn at_least(self, min: usize) -> LeaseRequest {
        LeaseRequest { min, ..self }
    }
}

/// A budget divided among a job's parts (see [`Budget::split`]).
#[derive(Debug)]
pub struct Shares {
    _held: Lease,
    parts: Vec<Budget>,
    over: usize,
}

impl Shares {
    /// The budget of part `i`, in the order of the wants.
    ///
    /// # Panics
    /// If there is no part `i`.
    pub fn part(&self, i: usize) -> &Budget {
        &self.parts[i]
    }

    /// Bytes the shares took beyond the divided budget (0 when they fit).
    pub fn over(&self) -> usize {
        self.over
    }
}

/// Rounds `n` up to a multiple of `align` (a power of two), saturating at the largest multiple.
pub fn round_up(n: usize, align: usize) -> usize {
    let mask = align.max(1) - 1;
    n.saturating_add(mask) & !mask
}

/// A share of the budget: up to `count()` buffers of `size()` bytes. Clones share it.
#[derive(Clone)]
pub struct Lease {
    inner: Arc<LeaseInner>,
}

struct LeaseInner {
    budget: Arc<BudgetInner>,
    size: usize,
    align: usize,
    count: usize,
    state: Mutex<LeaseState>,
}

struct LeaseState {
    allocated: usize,
    free: Vec<Raw>,
    /// Start address of every buffer allocated so far (free or handed out).
    all: Vec<usize>,
    /// One anonymous mapping holding every buffer of a large lease, mapped at the first
    /// allocation (see [`Arena`]); `None` until then, and for small leases.
    arena: Option<Arena>,
}

/// The memory of a lease of at least [`MAP_MIN`] bytes: one anonymous mapping, aligned to 2 MiB
/// and offered for transparent huge pages, cut into the lease's buffers. A buffer that lies in
/// huge pages is physically contiguous, so the kernel hands it to the device in one segment:
/// a 1 MiB request of 4 KiB pages needs 256 segments, over the 254 a virtio disk takes, and is
/// split in two requests; in huge pages it goes whole (fio's buffers mostly do). Pages are
/// zero when first touched and only committed then, so the mapping costs nothing up front.
struct Arena {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the arena is owned by its lease's state, behind its Mutex; it is only unmapped when
// the lease (and so every buffer in it) is gone.
unsafe impl Send for Arena {}

const HUGE: usize = 2 << 20;

impl Arena {
    /// Maps `len` bytes (rounded up to 2 MiB) at a 2 MiB-aligned address; `None` if the kernel
    /// refuses (the allocator is used instead).
    fn map(len: usize) -> Option<Arena> {
        use rustix::mm::{MapFlags, ProtFlags};
        let len = len.checked_add(HUGE - 1)? & !(HUGE - 1);
        let over = len.checked_add(HUGE)?;
        // SAFETY: a fresh mapping at an address the kernel chooses; it overlaps nothing we own.
        let p = unsafe { rustix::mm::mmap_anonymous(std::ptr::null_mut(), over, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE) }.ok()?;
        let start = p as usize;
        let aligned = (start + HUGE - 1) & !(HUGE - 1);
        let (head, tail) = (aligned - start, over - len - (aligned - start));
        if head > 0 {
            // SAFETY: the part of the mapping just made before the aligned range; nothing
            // references it.
            let _ = unsafe { rustix::mm::munmap(p, head) };
        }
        if tail > 0 {
            // SAFETY: the part of the mapping just made after the aligned range; nothing
            // references it.
            let _ = unsafe { rustix::mm::munmap((aligned + len) as *mut std::ffi::c_void, tail) };
        }
        let base = aligned as *mut std::ffi::c_void;
        // Best effort: without transparent huge pages the buffers work the same, page by page.
        // SAFETY: advice on the mapping just made; it changes no memory contents.
        let _ = unsafe { rustix::mm::madvise(base, len, rustix::mm::Advice::LinuxHugepage) };
        Some(Arena { base: NonNull::new(base.cast())?, len })
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: exactly the range `map` kept, unmapped once, after every buffer in it is gone.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

struct Raw(NonNull<u8>);
// SAFETY: a Raw is the sole owner of its heap allocation; it is only moved between threads.
unsafe impl Send for Raw {}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease").field("size", &self.size()).field("align", &self.align()).field("count", &self.count()).finish()
    }
}

impl Lease {
    /// Size of each buffer.
    pub fn size(&self) -> usize {
        self.inner.size
    }
    /// Alignment of each buffer.
    pub fn align(&self) -> usize {
        self.inner.align
    }
    /// How many buffers this lease may hold at once.
    pub fn count(&self) -> usize {
        self.inner.count
    }

    /// Allocates every buffer of the lease now and returns the (address, length) of each,
    /// handed out or not, for registering them with io_uring.
    pub fn preallocate(&self) -> Vec<(usize, usize)> {
        let mut st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.allocated < self.inner.count {
            let p = self.inner.allocate(&mut st);
            st.free.push(Raw(p));
        }
        st.all.iter().map(|&p| (p, self.inner.size)).collect()
    }

    /// Total bytes of the lease.
    pub fn bytes(&self) -> usize {
        self.inner.count * self.inner.size
    }

    /// A buffer, or `None` when all `count()` are out.
    pub fn get(&self) -> Option<AlignedBuf> {
        let mut st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let ptr = if let Some(raw) = st.free.pop() {
            raw.0
        } else if st.allocated < self.inner.count {
            self.inner.allocate(&mut st)
        } else {
            return None;
        };
        Some(AlignedBuf { ptr, cap: self.inner.size, align: self.inner.align, home: Some(self.inner.clone()), mapped: 0 })
    }
}

impl LeaseInner {
    /// The next buffer of the lease (the caller checked that fewer than `count` exist): a slice
    /// of the arena for a large lease, else its own allocation.
    fn allocate(&self, st: &mut LeaseState) -> NonNull<u8> {
        let page = rustix::param::page_size();
        if st.allocated == 0 && self.count * self.size >= MAP_MIN && self.align <= HUGE && self.size % page == 0 {
            st.arena = Arena::map(self.count * self.size);
        }
        let i = st.allocated;
        st.allocated += 1;
        let p = match &st.arena {
            Some(a) => {
                // SAFETY: buffer `i` (< count) of the arena, which holds count * size bytes;
                // the arena is 2 MiB-aligned and size a multiple of the alignment, so the
                // slice is aligned.
                let p = unsafe { a.base.as_ptr().add(i * self.size) };
                NonNull::new(p).unwrap_or(a.base)
            }
            None => alloc_zeroed(self.size, self.align),
        };
        st.all.push(p.as_ptr() as usize);
        p
    }
}

impl Drop for LeaseInner {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let in_arena = st.arena.is_some();
        for raw in st.free.drain(..) {
            if !in_arena {
                dealloc(raw.0, self.size, self.align);
            }
        }
        // The arena (if any) is unmapped when the state is dropped, after this.
        let mut used = self.budget.used.lock().unwrap_or_else(|e| e.into_inner());
        *used = used.saturating_sub(self.count * self.size);
        // Read under the lock a waiter holds while it counts itself in, so none is missed.
        if self.budget.waiting.load(Ordering::Relaxed) > 0 {
            self.budget.freed.notify_all();
        }
        drop(used);
    }
}

fn layout(size: usize, align: usize) -> Option<Layout> {
    Layout::from_size_align(size.max(1), align).ok()
}

/// Allocates zeroed memory; `None` if the size and alignment form no valid layout.
fn try_alloc_zeroed(size: usize, align: usize) -> Option<NonNull<u8>> {
    let l = layout(size, align)?;
    // SAFETY: the layout has a non-zero size. Zeroed memory: no buffer ever exposes whatever a
    // previous owner of the memory left (a padded write never leaks uninitialised bytes).
    let p = unsafe { alloc::alloc_zeroed(l) };
    Some(NonNull::new(p).unwrap_or_else(|| alloc::handle_alloc_error(l)))
}

/// Allocates zeroed memory of a size and alignment checked to form a valid layout (a lease's
/// buffers: `Budget::lease` checks them).
fn alloc_zeroed(size: usize, align: usize) -> NonNull<u8> {
    match try_alloc_zeroed(size, align) {
        Some(p) => p,
        None => panic!("buffer of {size} B aligned to {align} is too large"),
    }
}

fn dealloc(p: NonNull<u8>, size: usize, align: usize) {
    let Some(l) = layout(size, align) else { return };
    // SAFETY: `p` came from `alloc_zeroed` with this same size and alignment (so `l` is the
    // layout it was allocated with) and is freed once.
    unsafe { alloc::dealloc(p.as_ptr(), l) }
}

/// Buffers made by [`AlignedBuf::new`] at least this large are mapped straight from the
/// kernel: anonymous pages are zero when first touched, so the allocator's zeroing pass (a
/// second write of every page) is skipped, and the range is offered for transparent huge pages.
/// Measured on a 2-vCPU VM (Linux 6.18): touching 1 GiB of 4 KiB pages costs 0.45-0.6 s of CPU, of
/// 2 MiB pages 0.19 s, which matters for a whole file read into one buffer.
pub const MAP_MIN: usize = 2 << 20;

/// A heap buffer whose address is aligned for O_DIRECT. Derefs to its whole capacity.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
    align: usize,
    home: Option<Arc<LeaseInner>>,
    /// Length of the anonymous mapping this buffer owns (0: it came from the allocator).
    mapped: usize,
}

// SAFETY: AlignedBuf uniquely owns its allocation (like Vec<u8>); the lease it returns to is
// behind a Mutex.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of at least `len` bytes (rounded up to `align`, a power of two or
    /// rounded up to one), outside any budget: for results the caller keeps, such as a whole
    /// file read into memory. Large buffers (see `MAP_MIN`) are anonymous mappings whose
    /// pages are zeroed by the kernel when first touched, so memory is only committed as it is
    /// filled.
    ///
    /// # Panics
    /// Like `Vec::with_capacity`, if the size rounded up exceeds `isize::MAX`; see
    /// [`AlignedBuf::try_new`].
    pub fn new(len: usize, align: usize) -> AlignedBuf {
        match AlignedBuf::try_new(len, align) {
            Some(b) => b,
            None => panic!("buffer of {len} B aligned to {align} is too large"),
        }
    }

    /// Like [`AlignedBuf::new`], but `None` where the size or alignment is too large.
    pub fn try_new(len: usize, align: usize) -> Option<AlignedBuf> {
        let align = align.max(1).checked_next_power_of_two()?;
        let cap = len.max(1).checked_add(align - 1)? & !(align - 1);
        // A slice over the buffer must fit isize (what a valid layout checks), mapped or not.
        layout(cap, align)?;
        let page = rustix::param::page_size();
        if cap >= MAP_MIN && align <= page {
            let mapped = cap.checked_add(page - 1)? & !(page - 1);
            if let Some(ptr) = map_anonymous(mapped) {
                return Some(AlignedBuf { ptr, cap, align, home: None, mapped });
            }
        }
        let ptr = try_alloc_zeroed(cap, align)?;
        Some(AlignedBuf { ptr, cap, align, home: None, mapped: 0 })
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Alignment of the start address.
    pub fn align(&self) -> usize {
        self.align
    }

    /// Raw pointer to the start, for handing to the kernel.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap initialised (zeroed at allocation) bytes, owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.cap) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        match self.home.take() {
            Some(home) => {
                let mut st = home.state.lock().unwrap_or_else(|e| e.into_inner());
                st.free.push(Raw(self.ptr));
            }
            None if self.mapped > 0 => {
                // SAFETY: exactly the mapping made by `map_anonymous` for this buffer, which
                // nothing else references once the buffer is dropped.
                let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.mapped) };
            }
            None => dealloc(self.ptr, self.cap, self.align),
        }
    }
}

/// A private anonymous read-write mapping of `len` bytes (a multiple of the page size), offered
/// for transparent huge pages where [`result_huge_pages`] allows; `None` if the kernel refuses
/// (the allocator is used instead).
fn map_anonymous(len: usize) -> Option<NonNull<u8>> {
    use rustix::mm::{MapFlags, ProtFlags};
    // SAFETY: a fresh mapping at an address the kernel chooses; it overlaps nothing we own.
    let p = unsafe { rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE) }.ok()?;
    if result_huge_pages().is_ok() {
        // Best effort: without transparent huge pages the mapping works the same, page by page.
        // SAFETY: advice on the mapping just made; it changes no memory contents.
        let _ = unsafe { rustix::mm::madvise(p, len, rustix::mm::Advice::LinuxHugepage) };
    }
    NonNull::new(p.cast())
}

/// virtio-balloon's free page reporting feature bit (VIRTIO_BALLOON_F_REPORTING).
const BALLOON_F_REPORTING: usize = 5;

/// Whether large result buffers (a whole file read into memory, a safetensors load) are
/// offered for transparent huge pages, and why not where they are not; decided once.
///
/// Huge pages cut the faults of first touching such a buffer 512-fold, but inside a VM whose
/// balloon device reports free pages to its host (Linux 5.7+ free page reporting), the free
/// 2 MiB blocks a huge page is taken from are exactly the ones handed back to the host, and each
/// must be faulted back in from it: loading 1 GiB into huge pages then cost 2-3 s of system
/// time against 0.4-0.6 s in 4 KiB pages. There, result buffers use 4 KiB pages (the I/O
/// buffers of a lease, reused for a whole job, keep their huge pages).
/// `CACHELESS_DISABLE=hugepages` turns them off anywhere.
pub fn result_huge_pages() -> &'static Result<(), String> {
    static VERDICT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    VERDICT.get_or_init(|| {
        if crate::env::disabled("hugepages") {
            return Err("disabled by CACHELESS_DISABLE".into());
        }
        let reporting = std::fs::read_dir("/sys/bus/virtio/drivers/virtio_balloon")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|d| std::fs::read_to_string(d.path().join("features")).ok())
            .any(|f| reports_free_pages(&f));
        if reporting {
            return Err("a virtio balloon reports free pages to the host, which takes back the free 2 MiB blocks huge pages come from".into());
        }
        Ok(())
    })
}

/// True when a virtio device's `features` file (one '0'/'1' per feature bit, bit 0 first) has
/// free page reporting.
fn reports_free_pages(features: &str) -> bool {
    features.trim().as_bytes().get(BALLOON_F_REPORTING) == Some(&b'1')
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf").field("cap", &self.cap).field("align", &self.align).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The balloon's feature string is read bit 0 first: bit 5 is free page reporting.
    #[test]
    fn free_page_reporting_is_bit_five_of_the_balloon_features() {
        assert!(reports_free_pages("0110010100000000\n"));
        assert!(!reports_free_pages("0110000100000000\n"));
        assert!(!reports_free_pages("011"));
        assert!(!reports_free_pages(""));
    }

    /// A large lease cuts its buffers from one 2 MiB-aligned mapping (huge pages where the
    /// kernel gives them): zeroed, disjoint, each aligned, reused after a drop, and the budget
    /// whole again once the lease and its buffers are gone.
    #[test]
    fn a_large_lease_cuts_its_buffers_from_one_aligned_arena() {
        let b = Budget::new(64 << 20);
        {
            let lease = b.lease(LeaseRequest::buffers(1 << 20, 9).aligned(4096));
            let mut bufs: Vec<_> = (0..9).map(|_| lease.get().unwrap()).collect();
            assert!(lease.get().is_none());
            let base = bufs[0].as_ptr() as usize;
            assert_eq!(base % HUGE, 0, "the arena starts on a 2 MiB boundary");
            for (i, x) in bufs.iter_mut().enumerate() {
                assert_eq!(x.as_ptr() as usize, base + i * (1 << 20), "buffer {i} is the arena's {i}th");
                assert!(x.iter().all(|&v| v == 0), "buffer {i} starts zeroed");
                x.fill(u8::try_from(i).unwrap() + 1);
            }
            for (i, x) in bufs.iter().enumerate() {
                assert!(x.iter().all(|&v| usize::from(v) == i + 1), "buffer {i} was written over by another");
            }
            let p = bufs.pop().unwrap().as_ptr() as usize;
            assert_eq!(lease.get().unwrap().as_ptr() as usize, p, "a dropped buffer is handed out again");
            assert_eq!(lease.preallocate().len(), 9);
        }
        assert_eq!(b.used(), 0);
        // A lease under 2 MiB in all keeps the allocator's buffers.
        let lease = b.lease(LeaseRequest::buffers(4096, 2).aligned(4096));
        let x = lease.get().unwrap();
        assert!(lease.inner.state.lock().unwrap().arena.is_none());
        assert_eq!(x.as_ptr() as usize % 4096, 0);
    }

    #[test]
    fn buffers_are_aligned_and_return_to_the_lease() {
        let b = Budget::new(1 << 20);
        let lease = b.lease(LeaseRequest::buffers(4096 * 3, 4).aligned(4096));
        assert_eq!(lease.count(), 4);
        let bufs: Vec<_> = (0..4).map(|_| lease.get().unwrap()).collect();
        assert!(lease.get().is_none());
        for x in &bufs {
            assert_eq!(x.as_ptr() as usize % 4096, 0);
            assert_eq!(x.len(), 4096 * 3);
        }
        drop(bufs);
        assert!(lease.get().is_some());
        assert_eq!(b.used(), 4 * 4096 * 3);
        drop(lease);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn lease_is_clamped_to_the_budget_and_waits_for_release() {
        let b = Budget::new(10 * 1024);
        let l1 = b.lease(LeaseRequest::buffers(4096, 8).aligned(4096));
        assert_eq!(l1.count(), 2);
        let b2 = b.clone();
        let t = std::thread::spawn(move || b2.lease(LeaseRequest::buffers(4096, 2).aligned(4096).at_least(2)).count());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!t.is_finished(), "second lease must wait while the first holds the budget");
        drop(l1);
        assert_eq!(t.join().unwrap(), 2);
    }

    #[test]
    fn large_buffers_are_mapped_zeroed_and_aligned() {
        let len = MAP_MIN * 2 + 5;
        let mut b = AlignedBuf::new(len, 4096);
        assert!(b.mapped > 0, "a buffer of {len} B should come from mmap");
        assert!(b.capacity() >= len && b.as_ptr() as usize % 4096 == 0);
        assert!(b.iter().all(|&x| x == 0), "fresh buffers read as zeros");
        b[len - 1] = 9;
        b[0] = 7;
        assert_eq!((b[0], b[len - 1]), (7, 9));
        let small = AlignedBuf::new(4096, 4096);
        assert_eq!(small.mapped, 0, "small buffers come from the allocator");
    }

    #[test]
    fn a_buffer_outlives_its_lease_handle() {
        let b = Budget::new(1 << 20);
        let lease = b.lease(LeaseRequest::buffers(512, 1).aligned(512));
        let mut x = lease.get().unwrap();
        drop(lease);
        x[0] = 7;
        assert_eq!(b.used(), 512);
        drop(x);
        assert_eq!(b.used(), 0);
    }
}
