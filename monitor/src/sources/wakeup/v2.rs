//! cgroup v2 wake-ups: a change of the group's `memory.events` (the kernel notifies a poller with POLLPRI when
//! `high`, `max`, `oom` or `oom_kill` move; `high` moves whenever the brake throttles, `max` when the group is at
//! its limit), and a PSI trigger on the group's `memory.pressure` (POLLPRI when the group's tasks stalled on memory
//! for `STALL_US` within `WINDOW_US`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

/// The PSI trigger: some task of the group stalled on memory for 10 ms within half a second (the shortest window
/// the kernel takes), so reclaim that starts to bite wakes the sampler at once.
pub(crate) const STALL_US: u32 = 10_000;
pub(crate) const WINDOW_US: u32 = 500_000;

/// `memory.events`, polled for changes.
pub struct Events {
    file: File,
    buf: Vec<u8>,
}

impl Events {
    pub fn open(dir: &Path) -> Result<Events, String> {
        let file = File::open(dir.join("memory.events")).map_err(|e| format!("memory.events: {e}"))?;
        let mut events = Events { file, buf: Vec::with_capacity(256) };
        // A read takes the current generation: only later changes are notified.
        events.consume();
        Ok(events)
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Reads the file again, which acknowledges the change notified (kernfs keeps notifying until it is read).
    pub(crate) fn consume(&mut self) {
        let _ = crate::base::kernfile::pread_record(&self.file, &mut self.buf);
    }
}

/// A PSI trigger on `memory.pressure`.
pub struct Pressure {
    file: File,
}

impl Pressure {
    pub fn open(dir: &Path) -> Result<Pressure, String> {
        let path = dir.join("memory.pressure");
        let mut file =
            OpenOptions::new().read(true).write(true).open(&path).map_err(|e| format!("memory.pressure: {e}"))?;
        // The trigger is one write of `some <stall us> <window us>` with its terminating NUL.
        let trigger = format!("some {STALL_US} {WINDOW_US}\0");
        file.write_all(trigger.as_bytes())
            .map_err(|e| format!("memory.pressure trigger {:?}: {e}", trigger.trim_end_matches('\0')))?;
        Ok(Pressure { file })
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
