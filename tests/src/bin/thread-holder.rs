//! `thread-holder <MiB>`: a fixture process whose memory is held by a thread after its main thread has exited.
//!
//! The main thread starts a thread and exits alone (the `exit` system call, which `pthread_exit` ends in, made
//! directly so that nothing unwinds through Rust's frames). The thread maps `MiB` of private anonymous memory,
//! writes to every page, waits until the main thread has let go of the address space (`/proc/<pid>/statm`, the
//! leader's, reads a size of 0; its `status` then has no `VmRSS` or `RssAnon` line), prints `ready <bytes>`, and
//! holds the memory until stdin closes. The process lives on in that thread: its pid names a leader with no memory.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const MIB: usize = 1024 * 1024;

/// Maps `len` bytes of private anonymous memory and touches every page; returns the mapping.
fn hold(len: usize) -> Result<*mut u8, String> {
    // SAFETY: a new private anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap {len}: {}", std::io::Error::last_os_error()));
    }
    let addr = p.cast::<u8>();
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let mut off = 0;
    while off < len {
        // SAFETY: off < len, inside the read-write mapping just made.
        unsafe { std::ptr::write_volatile(addr.add(off), 1) };
        off += page;
    }
    Ok(addr)
}

/// True once the leader's `statm` reads a size of 0: the main thread has exited and let go of the address space.
fn leader_gone() -> bool {
    let pid = std::process::id();
    let text = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap_or_default();
    text.split_ascii_whitespace().next() == Some("0")
}

fn holder(len: usize) -> Result<(), String> {
    let _mapping = hold(len)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !leader_gone() {
        if Instant::now() > deadline {
            return Err("the main thread did not exit within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {len}").and_then(|()| out.flush()).map_err(|e| e.to_string())?;
    for line in std::io::stdin().lock().lines() {
        line.map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let usage = "usage: thread-holder <MiB>";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let len = match args.as_slice() {
        [m] => m.parse::<usize>().ok().and_then(|m| m.checked_mul(MIB)),
        _ => None,
    };
    let Some(len) = len else {
        eprintln!("thread-holder: {usage}");
        return ExitCode::FAILURE;
    };
    let spawned = std::thread::Builder::new().name("holder".into()).spawn(move || {
        let code = match holder(len) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("thread-holder: {e}");
                1
            }
        };
        // The main thread is gone: returning from main cannot end the process, so the thread ends it.
        std::process::exit(code);
    });
    if let Err(e) = spawned {
        eprintln!("thread-holder: cannot start the thread: {e}");
        return ExitCode::FAILURE;
    }
    // SAFETY: `exit` (not `exit_group`) ends only the calling thread; the other borrows nothing on its stack.
    unsafe { libc::syscall(libc::SYS_exit, 0) };
    ExitCode::FAILURE
}
