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
pub(crate) fn dir_from_env() -> Option<PathBuf> {
    ["STATE_DIRECTORY", "RUNTIME_DIRECTORY"].iter().find_map(|k| {
        let v = std::env::var_os(k)?;
        let first = v.to_str()?.split(':').next()?.to_string();
        (!first.is_empty()).then(|| PathBuf::from(first))
    })
}

/// `brake-<boot id>-<inode>`: the record file's name for the group directory `group_dir` in `files`.
pub(crate) fn path_for(files: &Path, group_dir: &Path) -> io::Result<PathBuf> {
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
