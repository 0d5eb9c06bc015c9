//! The brake's record kept as a file, where the group's directory refuses the extended attribute (the hardened
//! units leave the cgroup directory root's and hand only `memory.high` to the agent's user, so `setxattr` fails
//! with EACCES). The file sits in the agent's own directory: systemd's `$STATE_DIRECTORY` (StateDirectory=), else
//! `$RUNTIME_DIRECTORY` (RuntimeDirectory=). Its name carries the boot id and the group directory's inode,
//! `brake-<boot id>-<inode>`, so that a group created again (a new inode) or a reboot never finds a stale record.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The directory for record files: the first of `$STATE_DIRECTORY`'s paths (systemd lists several with `:`), else
/// the first of `$RUNTIME_DIRECTORY`'s; None outside systemd.
pub fn dir_from_env() -> Option<PathBuf> {
    ["STATE_DIRECTORY", "RUNTIME_DIRECTORY"].iter().find_map(|k| {
        let v = std::env::var_os(k)?;
        let first = v.to_str()?.split(':').next()?.to_string();
        (!first.is_empty()).then(|| PathBuf::from(first))
    })
}

/// `brake-<boot id>-<inode>`: the record file's name for the group directory `group_dir` in `files`.
pub fn path_for(files: &Path, group_dir: &Path) -> io::Result<PathBuf> {
    let ino = std::fs::metadata(group_dir)?.ino();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?;
    Ok(files.join(format!("brake-{}-{ino}", boot.trim())))
}

/// The record's text, None when there is no file.
pub fn get(file: &Path) -> io::Result<Option<String>> {
    match std::fs::read_to_string(file) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes the record whole: a temporary file renamed over the old one, so a crash leaves the old or the new.
pub fn set(file: &Path, text: &str) -> io::Result<()> {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, file)
}

/// Removes the record; none there is done too.
pub fn remove(file: &Path) -> io::Result<()> {
    match std::fs::remove_file(file) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::brake::Brake;

    /// A ramfs mount standing for a group directory that refuses the record's extended attribute (ramfs keeps
    /// none: EOPNOTSUPP, as the hardened units' root-owned cgroup directory refuses it with EACCES), with a plain
    /// `memory.high`. Unmounted and removed on drop.
    struct Refusing(PathBuf);

    impl Refusing {
        /// None (with the reason printed) where ramfs cannot be mounted (not root); a failure in CI.
        fn new(name: &str) -> Option<Refusing> {
            let dir = std::env::temp_dir().join(format!("monitor-brake-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("mkdir");
            let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).expect("path");
            // SAFETY: NUL-terminated strings we own; ramfs takes no data.
            let rc = unsafe { libc::mount(c"ramfs".as_ptr(), c.as_ptr(), c"ramfs".as_ptr(), 0, std::ptr::null()) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                let _ = std::fs::remove_dir(&dir);
                assert!(std::env::var("CI").is_err(), "mounting ramfs at {}: {e}", dir.display());
                eprintln!("skipping brake file test {name}: mounting ramfs needs root ({e})");
                return None;
            }
            let g = Refusing(dir);
            std::fs::write(g.0.join("memory.high"), "max").expect("memory.high");
            Some(g)
        }

        fn high(&self) -> String {
            std::fs::read_to_string(self.0.join("memory.high")).expect("memory.high").trim().to_string()
        }
    }

    impl Drop for Refusing {
        fn drop(&mut self) {
            if let Ok(c) = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()) {
                // SAFETY: a NUL-terminated path we own.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    #[test]
    fn where_the_directory_refuses_the_attribute_the_record_is_a_file() {
        let Some(g) = Refusing::new("refusing") else { return };
        let files = std::env::temp_dir().join(format!("monitor-brake-files-{}", std::process::id()));
        std::fs::create_dir_all(&files).expect("mkdir");
        let limit = 512 << 20;
        let brake = Brake::engage_in(&g.0, 0.5, limit, Some(&files)).expect("engage");
        assert_eq!(g.high(), (256u64 << 20).to_string());
        assert_eq!(brake.status().warning, None, "the record is kept");
        let file = path_for(&files, &g.0).expect("path");
        assert_eq!(get(&file).expect("read").as_deref(), Some("previous=max set=268435456"));
        // As if SIGKILLed: nothing runs on the way out; the next agent finds the file and puts the old value back.
        std::mem::forget(brake);
        assert_eq!(Brake::recover_in(&g.0, Some(&files)).expect("recover").as_deref(), Some("max"));
        assert_eq!(g.high(), "max");
        assert_eq!(get(&file).expect("read"), None, "the record goes with the brake");
        // Released at stop: value and file.
        let brake = Brake::engage_in(&g.0, 0.5, limit, Some(&files)).expect("engage again");
        assert!(get(&file).expect("read").is_some());
        brake.release().expect("release");
        assert_eq!((g.high().as_str(), get(&file).expect("read")), ("max", None));
        // With no place for a file, the brake still works and its status says the record is not kept.
        let brake = Brake::engage_in(&g.0, 0.5, limit, None).expect("engage without a file");
        assert_eq!(g.high(), (256u64 << 20).to_string());
        let warning = brake.status().warning.unwrap_or_default();
        assert!(warning.contains("cannot keep the brake's record"), "{warning}");
        brake.release().expect("release");
        assert_eq!(g.high(), "max");
        let _ = std::fs::remove_dir_all(&files);
    }

    #[test]
    fn a_record_file_is_named_by_boot_and_inode_and_round_trips() {
        let files = std::env::temp_dir().join(format!("monitor-brake-file-{}", std::process::id()));
        let (a, b) = (files.join("a"), files.join("b"));
        for d in [&a, &b] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        let (pa, pb) = (path_for(&files, &a).expect("path a"), path_for(&files, &b).expect("path b"));
        assert_ne!(pa, pb, "two groups, two files");
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot_id");
        let name = pa.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        assert!(name.starts_with(&format!("brake-{}-", boot.trim())), "{name}");
        assert_eq!(get(&pa).expect("get"), None);
        set(&pa, "previous=max set=4096").expect("set");
        set(&pa, "previous=max set=8192").expect("set again");
        assert_eq!(get(&pa).expect("get").as_deref(), Some("previous=max set=8192"));
        remove(&pa).expect("remove");
        remove(&pa).expect("remove again");
        assert_eq!(get(&pa).expect("get"), None);
        let _ = std::fs::remove_dir_all(&files);
    }
}
