//! Drives the `alloc-hog` fixture: a process holding a known amount of touched anonymous memory, resized on
//! command.

use crate::child::{spawn_in_cgroup, ChildGuard};
use crate::MIB;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

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
        let mut cmd = Command::new(bin.as_ref());
        cmd.arg(mib.to_string()).stdin(Stdio::piped()).stdout(Stdio::piped());
        if thp {
            cmd.arg("--thp");
        }
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
