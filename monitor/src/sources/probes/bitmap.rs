//! Array maps created with `BPF_F_MMAPABLE`, mapped into our memory and touched only through atomics, so that the
//! kernel's programs and user space change them side by side:
//! - the tgid filter (`FILTER`): the kernel's `fork` program sets the bits of children while user space sets and
//!   clears the group's; both change single bits with atomic operations, so neither undoes a change the other made
//!   to the same word;
//! - the fork count (`FORK_COUNT`): the `fork` program adds to it, user space reads it without a system call.

use aya::maps::MapData;
use std::os::fd::AsFd as _;
use std::os::fd::AsRawFd as _;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The first `len` words of an array map, mapped shared; unmapped on drop.
struct Words {
    words: NonNull<AtomicU64>,
    len: usize,
    /// Keeps the map's fd open as long as the mapping (the mapping alone would keep the map, too).
    _map: MapData,
}

// SAFETY: the mapping is plain shared memory touched only through atomics; it moves with its owner.
unsafe impl Send for Words {}

impl Words {
    fn map(map: MapData, len: usize) -> std::io::Result<Words> {
        let fd = map.fd().as_fd().as_raw_fd();
        // SAFETY: a new shared mapping of a BPF array fd; the kernel checks the length against the map.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len * 8, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let words = NonNull::new(p.cast::<AtomicU64>()).ok_or_else(|| std::io::Error::other("mmap returned null"))?;
        Ok(Words { words, len, _map: map })
    }

    /// Word `w`, when the mapping has it.
    fn get(&self, w: usize) -> Option<&AtomicU64> {
        // SAFETY: `w < len` words of a live mapping, page-aligned so every word is 8-byte aligned.
        (w < self.len).then(|| unsafe { &*self.words.as_ptr().add(w) })
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.words.as_ptr().cast(), self.len * 8) };
    }
}

/// The mapped bitmap: bit `tgid % 64` of word `tgid / 64`.
pub(crate) struct Bitmap(Words);

impl Bitmap {
    /// Maps the first `len` words of an array map created with `BPF_F_MMAPABLE`.
    pub fn map(map: MapData, len: u32) -> std::io::Result<Bitmap> {
        Words::map(map, len as usize).map(Bitmap)
    }

    fn word(&self, tgid: u32) -> Option<(&AtomicU64, u64)> {
        let (w, bit) = monitor_common::filter::slot(tgid);
        self.0.get(w as usize).map(|w| (w, bit))
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

/// A counter the kernel adds to (word 0 of a one-word `BPF_F_MMAPABLE` array), read from our memory without a
/// system call.
pub struct Counter(Words);

impl Counter {
    pub fn map(map: MapData) -> std::io::Result<Counter> {
        Words::map(map, 1).map(Counter)
    }

    pub fn load(&self) -> u64 {
        self.0.get(0).map_or(0, |w| w.load(Ordering::Acquire))
    }
}
