//! `alloc-hog <MiB> [--thp]`: a fixture process that holds a known amount of touched anonymous memory.
//!
//! Maps `MiB` of private anonymous memory (transparent huge pages asked for with `--thp`, refused otherwise),
//! writes to every page, prints `ready <bytes>`, then reads commands on stdin: `set <MiB>` resizes the mapping
//! in place (grows with `mremap` and touches the new pages; shrinks by unmapping the tail, so the total never
//! dips or overshoots while it changes) and prints `ok <bytes>`. Exits when stdin closes.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::ptr;

const MIB: usize = 1024 * 1024;
const HUGE: usize = 2 * MIB;

struct Region {
    addr: *mut u8,
    len: usize,
    thp: bool,
    page: usize,
}

impl Region {
    fn advise(&self, start: usize, len: usize) -> Result<(), String> {
        let advice = if self.thp { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
        // SAFETY: [addr+start, addr+start+len) lies inside our mapping.
        let r = unsafe { libc::madvise(self.addr.add(start).cast(), len, advice) };
        if r != 0 {
            return Err(format!("madvise: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    fn touch(&mut self, from: usize) {
        let mut off = from;
        while off < self.len {
            // SAFETY: off < len, inside our read-write mapping.
            unsafe { ptr::write_volatile(self.addr.add(off), 1) };
            off += self.page;
        }
    }

    /// A fresh mapping of `len` bytes, 2 MiB aligned so huge pages can back it.
    fn map(&mut self, len: usize) -> Result<(), String> {
        let span = len + HUGE;
        // SAFETY: a new private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap {len}: {}", std::io::Error::last_os_error()));
        }
        let base = p as usize;
        let start = (base + HUGE - 1) & !(HUGE - 1);
        let head = start - base;
        let tail = span - head - len;
        // SAFETY: both pieces are inside the mapping just made and unused.
        unsafe {
            if head > 0 {
                libc::munmap(p, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
        }
        self.addr = start as *mut u8;
        self.len = len;
        self.advise(0, len)?;
        self.touch(0);
        Ok(())
    }

    fn resize(&mut self, len: usize) -> Result<(), String> {
        if self.len == 0 {
            return if len == 0 { Ok(()) } else { self.map(len) };
        }
        if len < self.len {
            // Unmap the tail (rounded to pages); all of it when len is 0.
            let keep = len.div_ceil(self.page) * self.page;
            // SAFETY: [addr+keep, addr+self.len) is the tail of our mapping.
            let r = unsafe { libc::munmap(self.addr.add(keep).cast(), self.len - keep) };
            if r != 0 {
                return Err(format!("munmap: {}", std::io::Error::last_os_error()));
            }
            self.len = len;
            if len == 0 {
                self.addr = ptr::null_mut();
            }
        } else if len > self.len {
            // SAFETY: addr/len describe our mapping; MAYMOVE lets the kernel relocate it, returning the new address.
            let p = unsafe { libc::mremap(self.addr.cast(), self.len, len, libc::MREMAP_MAYMOVE) };
            if p == libc::MAP_FAILED {
                return Err(format!("mremap to {len}: {}", std::io::Error::last_os_error()));
            }
            let old = self.len;
            self.addr = p.cast();
            self.len = len;
            self.advise(0, len)?;
            self.touch(old);
        }
        Ok(())
    }
}

fn parse_mib(s: &str) -> Result<usize, String> {
    s.parse::<usize>().ok().and_then(|m| m.checked_mul(MIB)).ok_or_else(|| format!("not a size in MiB: {s:?}"))
}

fn run() -> Result<(), String> {
    let mut mib = None;
    let mut thp = false;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--thp" => thp = true,
            "-h" | "--help" => return Err("usage: alloc-hog <MiB> [--thp]".into()),
            _ if mib.is_none() => mib = Some(parse_mib(&a)?),
            _ => return Err(format!("unexpected argument {a:?}")),
        }
    }
    let len = mib.ok_or("usage: alloc-hog <MiB> [--thp]")?;
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let mut region = Region { addr: ptr::null_mut(), len: 0, thp, page };
    region.resize(len)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {}", region.len).and_then(|()| out.flush()).map_err(|e| e.to_string())?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["set", m] => {
                region.resize(parse_mib(m)?)?;
                writeln!(out, "ok {}", region.len).and_then(|()| out.flush()).map_err(|e| e.to_string())?;
            }
            [] => {}
            _ => return Err(format!("unknown command {line:?} (want `set <MiB>`)")),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("alloc-hog: {e}");
            ExitCode::FAILURE
        }
    }
}
