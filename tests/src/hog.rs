//! Drives the `alloc-hog` fixture: a process holding a known amount of touched anonymous memory, resized on
//! command; and the `thread-holder` fixture: a process whose memory is held by a thread after its main thread exited.

use crate::child::{spawn_in_cgroup, ChildGuard};
use crate::MIB;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

/// Makes the child that `cmd` spawns ignore `signals` (a disposition `execve` keeps): a process that does not obey
/// the agent's abort signal, and does not die of it either.
pub fn ignoring(cmd: &mut Command, signals: &[libc::c_int]) {
    let signals = signals.to_vec();
    // SAFETY: the closure runs in the forked child before exec and only calls `signal`, which is async-signal-safe,
    // on memory allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for &s in &signals {
                if libc::signal(s, libc::SIG_IGN) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Reads the fixture's `ready <bytes>` line; panics naming `what` otherwise.
fn ready(what: &str, child: &mut ChildGuard, stdout: &mut BufReader<ChildStdout>) -> u64 {
    let mut line = String::new();
    let n = stdout.read_line(&mut line);
    match (n, line.split_whitespace().collect::<Vec<_>>().as_slice()) {
        (Ok(_), ["ready", bytes]) => bytes.parse().unwrap_or_else(|_| panic!("{what}: bad reply {line:?}")),
        (Ok(0), _) => panic!("{what} closed its output (exit: {:?})", child.try_wait().ok().flatten()),
        (r, _) => panic!("{what}: expected `ready <bytes>`, got {line:?} ({r:?})"),
    }
}

/// A running `alloc-hog` (killed on drop).
pub struct Hog {
    child: ChildGuard,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    bytes: u64,
}

impl Hog {
    /// Starts `bin` (the `alloc-hog` binary, e.g. `env!("CARGO_BIN_EXE_alloc-hog")`) inside the cgroup
    /// directory `cgroup`, holding `mib` MiB (transparent huge pages asked for when `thp`), and waits until it
    /// has touched all of it.
    pub fn spawn(bin: impl AsRef<Path>, cgroup: &Path, mib: u64, thp: bool) -> Hog {
        Hog::spawn_ignoring(bin, cgroup, mib, thp, &[])
    }

    /// [`Hog::spawn`], the hog ignoring `signals` (see [`ignoring`]).
    pub fn spawn_ignoring(bin: impl AsRef<Path>, cgroup: &Path, mib: u64, thp: bool, signals: &[libc::c_int]) -> Hog {
        let mut cmd = Command::new(bin.as_ref());
        cmd.arg(mib.to_string()).stdin(Stdio::piped()).stdout(Stdio::piped());
        if thp {
            cmd.arg("--thp");
        }
        ignoring(&mut cmd, signals);
        let mut child = spawn_in_cgroup(&mut cmd, cgroup);
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            panic!("alloc-hog started without pipes");
        };
        let mut hog = Hog { child, stdin, stdout: BufReader::new(stdout), bytes: 0 };
        hog.bytes = hog.expect_reply("ready");
        assert_eq!(hog.bytes, mib * MIB, "alloc-hog holds another amount than asked");
        hog
    }

    fn expect_reply(&mut self, word: &str) -> u64 {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line);
        let pid = self.child.pid();
        match (n, line.split_whitespace().collect::<Vec<_>>().as_slice()) {
            (Ok(_), [w, bytes]) if *w == word => match bytes.parse() {
                Ok(b) => b,
                Err(_) => panic!("alloc-hog {pid}: bad reply {line:?}"),
            },
            (Ok(0), _) => {
                let status = self.child.try_wait().ok().flatten();
                panic!("alloc-hog {pid} closed its output (exit: {status:?}; OOM-killed?)");
            }
            (r, _) => panic!("alloc-hog {pid}: expected `{word} <bytes>`, got {line:?} ({r:?})"),
        }
    }

    /// Resizes to `mib` MiB (touched) and waits for the acknowledgement.
    pub fn set_mib(&mut self, mib: u64) {
        if let Err(e) = writeln!(self.stdin, "set {mib}").and_then(|()| self.stdin.flush()) {
            panic!("alloc-hog {}: cannot send command: {e}", self.child.pid());
        }
        self.bytes = self.expect_reply("ok");
        assert_eq!(self.bytes, mib * MIB);
    }

    /// Asks for `mib` MiB without waiting for the acknowledgement: for a hog that may be told to end (or be killed)
    /// while it grows. Its reply, if any, is left unread.
    pub fn ask_mib(&mut self, mib: u64) {
        if let Err(e) = writeln!(self.stdin, "set {mib}").and_then(|()| self.stdin.flush()) {
            panic!("alloc-hog {}: cannot send command: {e}", self.child.pid());
        }
    }

    /// The pid.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The bytes it holds (its mapping, not counting the program itself).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Its `RssAnon` now, from `/proc/<pid>/status`.
    pub fn rss_anon(&self) -> u64 {
        crate::proc::rss_anon(self.pid()).unwrap_or_else(|| panic!("alloc-hog {} is gone", self.pid()))
    }

    /// Its `VmRSS` now, from `/proc/<pid>/status`.
    pub fn vm_rss(&self) -> u64 {
        crate::proc::vm_rss(self.pid()).unwrap_or_else(|| panic!("alloc-hog {} is gone", self.pid()))
    }
}

/// A running `thread-holder` (killed on drop): its main thread has exited, another thread holds its memory.
pub struct ThreadHolder {
    pub child: ChildGuard,
    _stdin: ChildStdin,
    bytes: u64,
}

impl ThreadHolder {
    /// Starts `bin` (the `thread-holder` binary) holding `mib` MiB, in the cgroup directory `cgroup` if given,
    /// ignoring `signals` (see [`ignoring`]), and waits until its main thread has exited with the memory touched.
    pub fn spawn(bin: impl AsRef<Path>, cgroup: Option<&Path>, mib: u64, signals: &[libc::c_int]) -> ThreadHolder {
        let mut cmd = Command::new(bin.as_ref());
        cmd.arg(mib.to_string()).stdin(Stdio::piped()).stdout(Stdio::piped());
        ignoring(&mut cmd, signals);
        let mut child = match cgroup {
            Some(cg) => spawn_in_cgroup(&mut cmd, cg),
            None => ChildGuard::spawn(&mut cmd),
        };
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            panic!("thread-holder started without pipes");
        };
        let what = format!("thread-holder {}", child.pid());
        let bytes = ready(&what, &mut child, &mut BufReader::new(stdout));
        assert_eq!(bytes, mib * MIB, "{what} holds another amount than asked");
        ThreadHolder { child, _stdin: stdin, bytes }
    }

    /// The pid (its leader's, which has exited).
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The bytes its thread holds (its mapping, not counting the program itself).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}
