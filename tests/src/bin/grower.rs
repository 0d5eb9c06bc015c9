//! `grower [--rate-mib-s N | --rate-mb-s N] [--chunk-mib N] [--max-mib N] [--ignore-signal | --ignore-all]`: a
//! fixture process that grows its anonymous memory as fast as a runaway server would, for the reaction tests and
//! `cargo xtask bench reaction`.
//!
//! It prints `ready <pid>`, waits for a line on stdin, then maps and touches `--chunk-mib` (default 4) MiB chunks
//! until it holds `--max-mib` (default 700), paced to `--rate-mib-s` MiB/s or `--rate-mb-s` MB/s (10^6 bytes; 0,
//! the default: as fast as it can). Pacing spins, as a busy server would. It stamps each chunk with
//! `CLOCK_MONOTONIC` in a table made before it starts, so growing allocates nothing else.
//!
//! On SIGUSR2 (monitor's abort signal in these tests) it stamps the signal's arrival in the handler, unmaps every
//! chunk, prints one JSON line and exits 0:
//! `{"signal_ns": N, "freed_ns": N, "peak_bytes": N, "chunks": [[t_ns, bytes_after], ...]}`
//! (times from `CLOCK_MONOTONIC`, which the bench reads too). Having reached `--max-mib` it holds its memory until
//! the signal, or until stdin closes (then it prints the same line with `signal_ns` null and exits 0). With
//! `--ignore-signal` it ignores SIGUSR2, so the kernel's OOM killer ends it if the group's limit is below
//! `--max-mib`.
//!
//! With `--ignore-all` it is the uncooperative grower: it ignores every signal it can (1..=64 but SIGKILL and
//! SIGSTOP; the few the C library keeps for itself are left as they are), so only SIGKILL stops it, and it prints
//! one line per chunk as it goes, `chunk <t_ns> <bytes_after>`, written straight to fd 1, so the stamps of the
//! chunks it made before a SIGKILL survive it.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const MIB: usize = 1024 * 1024;

static SIGNALLED: AtomicBool = AtomicBool::new(false);
static SIGNAL_NS: AtomicU64 = AtomicU64::new(0);

/// `CLOCK_MONOTONIC` in nanoseconds (async-signal-safe).
fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

extern "C" fn on_abort(_: libc::c_int) {
    SIGNAL_NS.store(now_ns(), Ordering::SeqCst);
    SIGNALLED.store(true, Ordering::SeqCst);
}

struct Args {
    /// Bytes per second; 0: as fast as it can.
    rate_bytes_s: u64,
    chunk_mib: usize,
    max_mib: usize,
    ignore_signal: bool,
    ignore_all: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args { rate_bytes_s: 0, chunk_mib: 4, max_mib: 700, ignore_signal: false, ignore_all: false };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--ignore-signal" {
            a.ignore_signal = true;
            continue;
        }
        if flag == "--ignore-all" {
            a.ignore_all = true;
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let n: u64 = v.parse().map_err(|_| format!("{flag} {v}: not a whole number"))?;
        match flag.as_str() {
            "--rate-mib-s" => a.rate_bytes_s = n.saturating_mul(MIB as u64),
            "--rate-mb-s" => a.rate_bytes_s = n.saturating_mul(1_000_000),
            "--chunk-mib" if n > 0 => a.chunk_mib = n as usize,
            "--max-mib" if n > 0 => a.max_mib = n as usize,
            _ => return Err(format!("unknown or bad argument {flag} {v}")),
        }
    }
    Ok(a)
}

/// Maps and touches one chunk; None when the kernel refuses the mapping.
fn chunk(bytes: usize, page: usize) -> Option<*mut u8> {
    // SAFETY: a new private anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let p = p.cast::<u8>();
    let mut off = 0;
    while off < bytes {
        // SAFETY: off < bytes, inside the read-write mapping just made.
        unsafe { ptr::write_volatile(p.add(off), 1) };
        off += page;
    }
    Some(p)
}

/// Ignores every signal that can be ignored: all but SIGKILL and SIGSTOP (which the kernel refuses) and those the C
/// library reserves for its threads (it refuses them too); the refusals are not errors here.
fn ignore_all_signals() {
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: SIG_IGN for a signal number; a number the kernel or libc refuses returns SIG_ERR, harmlessly.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
}

/// Writes `chunk <t_ns> <bytes>` to fd 1 in one write(2), from a stack buffer: nothing allocated, nothing left in a
/// buffer when a SIGKILL comes.
fn stamp_line(t_ns: u64, bytes: u64) {
    let mut buf = [0u8; 64];
    let mut w: &mut [u8] = &mut buf;
    if writeln!(w, "chunk {t_ns} {bytes}").is_err() {
        return;
    }
    let n = 64 - w.len();
    // SAFETY: buf holds n initialized bytes; fd 1 is ours (a closed pipe gives EPIPE, SIGPIPE being ignored).
    unsafe { libc::write(1, buf.as_ptr().cast(), n) };
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("grower: {e}");
            return ExitCode::from(2);
        }
    };
    let handler = if args.ignore_signal { libc::SIG_IGN } else { on_abort as extern "C" fn(libc::c_int) as usize };
    // SAFETY: installing a handler that only stores to atomics, or SIG_IGN.
    unsafe { libc::signal(libc::SIGUSR2, handler) };
    if args.ignore_all {
        ignore_all_signals();
    }
    // SAFETY: sysconf has no preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => 4096,
    };
    let chunk_bytes = args.chunk_mib * MIB;
    let n_chunks = args.max_mib.div_ceil(args.chunk_mib);
    let mut maps: Vec<*mut u8> = Vec::with_capacity(n_chunks);
    let mut stamps: Vec<(u64, u64)> = Vec::with_capacity(n_chunks);

    println!("ready {}", std::process::id());
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let stdin = std::io::stdin();
    if stdin.lock().read_line(&mut line).unwrap_or(0) == 0 {
        return ExitCode::SUCCESS;
    }

    let start = now_ns();
    // Nanoseconds per chunk at the asked rate (0: no pacing).
    let per_chunk_ns = (chunk_bytes as u64 * 1_000_000_000).checked_div(args.rate_bytes_s).unwrap_or(0);
    while maps.len() < n_chunks && !SIGNALLED.load(Ordering::SeqCst) {
        if per_chunk_ns > 0 {
            let due = start + per_chunk_ns * maps.len() as u64;
            while now_ns() < due && !SIGNALLED.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            if SIGNALLED.load(Ordering::SeqCst) {
                break;
            }
        }
        match chunk(chunk_bytes, page) {
            Some(p) => maps.push(p),
            None => break,
        }
        let stamp = (now_ns(), (maps.len() * chunk_bytes) as u64);
        stamps.push(stamp);
        if args.ignore_all {
            stamp_line(stamp.0, stamp.1);
        }
    }
    let peak_bytes = maps.len() * chunk_bytes;
    // Hold until the signal, or until stdin closes (the test or bench is done with it).
    if !SIGNALLED.load(Ordering::SeqCst) {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let mut rest = String::new();
            while std::io::stdin().lock().read_line(&mut rest).unwrap_or(0) > 0 {
                rest.clear();
            }
            let _ = tx.send(());
        });
        while !SIGNALLED.load(Ordering::SeqCst) {
            match rx.recv_timeout(std::time::Duration::from_millis(1)) {
                Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }
    for p in maps.drain(..) {
        // SAFETY: each pointer is a mapping of chunk_bytes made above and unmapped once.
        unsafe { libc::munmap(p.cast(), chunk_bytes) };
    }
    let freed_ns = now_ns();
    let signal = SIGNALLED.load(Ordering::SeqCst).then(|| SIGNAL_NS.load(Ordering::SeqCst));
    let chunks: Vec<String> = stamps.iter().map(|(t, b)| format!("[{t},{b}]")).collect();
    println!(
        "{{\"signal_ns\": {}, \"freed_ns\": {freed_ns}, \"peak_bytes\": {peak_bytes}, \"chunks\": [{}]}}",
        signal.map_or("null".to_string(), |s| s.to_string()),
        chunks.join(",")
    );
    let _ = std::io::stdout().flush();
    ExitCode::SUCCESS
}
