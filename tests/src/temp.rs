//! Scratch directories: [`temp_dir`] (the test removes it) and [`TempDir`] (removed on drop).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A fresh directory `monitor-<name>-<pid>` under the system's temp dir (emptied first if a crashed run left one),
/// writable by every user as the temp dir is (mode 1777): an alert command of a root agent runs as an unprivileged
/// user and writes what it got here. Panics when it cannot be made. Tests remove it themselves at the end.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("monitor-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", d.display()));
    d
}

/// Writes a secret file as monitor wants one (mode 0600, owned by the test's user) and returns its path.
pub fn write_secret(path: &Path, body: &[u8]) -> PathBuf {
    let _ = std::fs::remove_file(path);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(body));
    written.unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path.to_path_buf()
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
