//! The tgid filter (`FILTER`), mapped into our memory. The kernel's `fork` program sets the bits of children
//! while user space sets and clears the group's; both change single bits with atomic operations, so neither
//! undoes a change the other made to the same word.

use aya::maps::MapData;
use std::os::fd::AsFd as _;
use std::os::fd::AsRawFd as _;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The mapped bitmap: bit `tgid % 64` of word `tgid / 64`.
pub struct Bitmap {
    words: NonNull<AtomicU64>,
    len: usize,
    /// Keeps the map's fd open as long as the mapping (the mapping alone would keep the map, too).
    _map: MapData,
}

// SAFETY: the mapping is plain shared memory touched only through atomics; it moves with its owner.
unsafe impl Send for Bitmap {}

impl Bitmap {
    /// Maps the first `len` words of an array map created with `BPF_F_MMAPABLE`.
    pub fn map(map: MapData, len: u32) -> std::io::Result<Bitmap> {
        let len = len as usize;
        let words = mmap_words(&map, len)?;
        Ok(Bitmap { words, len, _map: map })
    }

    fn word(&self, tgid: u32) -> Option<(&AtomicU64, u64)> {
        let (w, bit) = monitor_common::filter::slot(tgid);
        let w = w as usize;
        if w >= self.len {
            return None;
        }
        // SAFETY: `w < len` words of a live mapping, page-aligned so every word is 8-byte aligned.
        Some((unsafe { &*self.words.as_ptr().add(w) }, bit))
    }

    /// Traces `tgid` (tgids at or past `pid_max` do not exist and are ignored).
    pub fn set(&self, tgid: u32) {
        if let Some((w, bit)) = self.word(tgid) {
            w.fetch_or(bit, Ordering::SeqCst);
        }
    }

    /// Stops tracing `tgid`.
    pub fn clear(&self, tgid: u32) {
        if let Some((w, bit)) = self.word(tgid) {
            w.fetch_and(!bit, Ordering::SeqCst);
        }
    }
}

/// A shared mapping of the first `len` words of a `BPF_F_MMAPABLE` array map.
fn mmap_words(map: &MapData, len: usize) -> std::io::Result<NonNull<AtomicU64>> {
    let fd = map.fd().as_fd().as_raw_fd();
    // SAFETY: a new shared mapping of a BPF array fd; the kernel checks the length against the map.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len * 8, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    NonNull::new(p.cast::<AtomicU64>()).ok_or_else(|| std::io::Error::other("mmap returned null"))
}

/// A counter the kernel adds to (word 0 of a one-word `BPF_F_MMAPABLE` array), read from our memory without a
/// system call.
pub struct Counter {
    word: NonNull<AtomicU64>,
    _map: MapData,
}

// SAFETY: as for `Bitmap`: shared memory touched only through atomics.
unsafe impl Send for Counter {}

impl Counter {
    pub fn map(map: MapData) -> std::io::Result<Counter> {
        Ok(Counter { word: mmap_words(&map, 1)?, _map: map })
    }

    pub fn load(&self) -> u64 {
        // SAFETY: word 0 of a live mapping, page-aligned.
        unsafe { self.word.as_ref() }.load(Ordering::Acquire)
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.word.as_ptr().cast(), 8) };
    }
}

impl Drop for Bitmap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.words.as_ptr().cast(), self.len * 8) };
    }
}
