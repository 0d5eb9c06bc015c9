//! Scratch directories: [`temp_dir`] (the test removes it) and [`TempDir`] (removed on drop).

use std::path::{Path, PathBuf};

/// A fresh directory `monitor-<name>-<pid>` under the system's temp dir (emptied first if a crashed run left one).
/// Panics when it cannot be made. Tests remove it themselves at the end.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("monitor-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    d
}

/// A temporary directory `monitor-probes-<tag>-<pid>-<nanos>`, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let p = std::env::temp_dir().join(format!("monitor-probes-{tag}-{}-{nanos}", std::process::id()));
        if let Err(e) = std::fs::create_dir_all(&p) {
            panic!("mkdir {}: {e}", p.display());
        }
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `body` to `name` inside the directory and returns its path.
    pub fn write(&self, name: &str, body: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        if let Err(e) = std::fs::write(&p, body) {
            panic!("write {}: {e}", p.display());
        }
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
