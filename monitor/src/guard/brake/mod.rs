//! The memory brake (`[policy] brake_at`, cgroup v2 only): the agent sets the group's `memory.high` at a fraction
//! of its limit, so the kernel throttles a grower's allocations there instead of OOM-killing it at `memory.max`,
//! and the abort has time to land. `memory.max` is never touched.
//!
//! What the brake set and what was there before are kept in a record, the extended attribute
//! `user.monitor.brake` (`previous=<max|bytes> set=<bytes>`) on the group's directory: it survives the agent's
//! SIGKILL, so the next agent puts the old value back ([`Brake::recover`]), and it dies with the cgroup, so a
//! group created again never gets a stale record applied. A `memory.high` that no longer holds what the record says
//! was changed by someone else since, and is left to them. Where the directory refuses the attribute (root's, and
//! the agent is not: the hardened units), the record is a file in the agent's state or runtime directory
//! ([`file`]); with neither, the brake works without a record, and its status says so.

mod file;
mod record;
mod steer;

pub use record::{parse_record, Record, RECORD_XATTR};
pub use steer::Steering;

use crate::feed::BrakeStatus;
use record::{get_record, remove_record, set_record};
use std::io;
use std::path::{Path, PathBuf};

impl BrakeStatus {
    /// The status of a brake that could not be engaged at all.
    pub fn failed(at: f64, error: &BrakeError) -> BrakeStatus {
        let error = Some(error.to_string());
        BrakeStatus { at, high_bytes: None, previous: String::new(), error, note: None, warning: None }
    }
}

/// Everything that can go wrong braking.
#[derive(Debug, thiserror::Error)]
pub enum BrakeError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: {msg}")]
    Parse { path: PathBuf, msg: String },
    #[error("{path}: the brake's record ({RECORD_XATTR}): {source}")]
    Record { path: PathBuf, source: io::Error },
    #[error("brake_at {at} is not a fraction between 0 and 1")]
    Fraction { at: f64 },
    #[error("brake_at {at} of a {limit_bytes}-byte limit is less than a page")]
    TooLow { at: f64, limit_bytes: u64 },
}

/// A `memory.high` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum High {
    Max,
    Bytes(u64),
}

impl High {
    pub fn parse(text: &str) -> Option<High> {
        match text.trim() {
            "max" => Some(High::Max),
            t => t.parse().ok().map(High::Bytes),
        }
    }

    pub fn text(self) -> String {
        match self {
            High::Max => "max".into(),
            High::Bytes(b) => b.to_string(),
        }
    }

    fn at_or_below(self, bytes: u64) -> bool {
        matches!(self, High::Bytes(b) if b <= bytes)
    }
}

/// `at × limit_bytes`, rounded down to a whole page (as the kernel keeps `memory.high`); None below one page.
pub(crate) fn brake_bytes(at: f64, limit_bytes: u64, page: u64) -> Option<u64> {
    let page = page.max(1);
    let rounded = (at * limit_bytes as f64).floor() as u64 / page * page;
    (rounded >= page).then_some(rounded)
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as u64,
        _ => 4096,
    }
}

/// Errors that mean the filesystem will not keep the record (the brake still works without it). EROFS: systemd's
/// `ProtectControlGroups=yes` mounts the cgroup tree read-only, but for the `memory.high` the unit opens again.
fn refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EPERM | libc::EACCES | libc::EROFS | libc::ENOSPC | libc::E2BIG)
    )
}

/// The group's directory or file is gone (removed cgroup: ENOENT, or ENODEV on kernfs).
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

/// A record file's error, named by the file.
fn file_err(path: &Path) -> impl Fn(io::Error) -> BrakeError + '_ {
    move |source| BrakeError::Record { path: path.to_path_buf(), source }
}

fn read_high(dir: &Path) -> Result<High, BrakeError> {
    let path = dir.join("memory.high");
    let text = std::fs::read_to_string(&path).map_err(|source| BrakeError::Io { path: path.clone(), source })?;
    High::parse(&text).ok_or_else(|| BrakeError::Parse { path, msg: format!("neither bytes nor max: {text:?}") })
}

fn write_high(dir: &Path, value: High) -> Result<(), BrakeError> {
    use std::io::Write;
    let path = dir.join("memory.high");
    // Truncated so that a plain file (tests) holds exactly the value; the cgroup file ignores it.
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .and_then(|mut f| f.write_all(value.text().as_bytes()))
        .map_err(|source| BrakeError::Io { path, source })
}

/// Where the brake stands.
#[derive(Debug, Clone, PartialEq)]
enum Hold {
    /// `memory.high` holds these bytes, set by the brake.
    Set(u64),
    /// The group's own `memory.high` is at or below the brake's bytes: left alone.
    Stricter(u64),
    /// `memory.high` was changed by someone else while braked (the reason): left to them.
    LetGo(String),
}

/// The engaged brake on one group. Released (the old `memory.high` put back) by [`Brake::release`] or on drop.
#[derive(Debug)]
pub struct Brake {
    dir: PathBuf,
    at: f64,
    page: u64,
    /// The group's own `memory.high`, put back on release.
    previous: High,
    hold: Hold,
    /// Why the record cannot be kept, when it cannot (then crash recovery is off).
    no_record: Option<String>,
    /// The record's file where the directory refuses the extended attribute, and whether the record is there.
    file: Option<PathBuf>,
    in_file: bool,
    released: bool,
}

impl Brake {
    /// At start, before engaging: if a previous agent left the brake set (its record says what it set and what
    /// was there before) and memory.high still holds what it set, put the old value back; remove the record.
    /// Returns what was restored (for the log). A record whose set value no longer matches memory.high means
    /// someone else changed it since: leave memory.high alone, drop the record.
    pub(crate) fn recover(group_dir: &Path) -> Result<Option<String>, BrakeError> {
        Self::recover_in(group_dir, file::dir_from_env().as_deref())
    }

    /// [`Brake::recover`], looking for a record file in `files` where the directory has no record.
    pub(crate) fn recover_in(group_dir: &Path, files: Option<&Path>) -> Result<Option<String>, BrakeError> {
        let record_err = |source| BrakeError::Record { path: group_dir.to_path_buf(), source };
        let found = match get_record(group_dir) {
            Ok(Some(t)) => Some((t, None)),
            Ok(None) => None,
            Err(e) if refused(&e) => None,
            Err(e) => return Err(record_err(e)),
        };
        let found = match (found, files) {
            (Some(f), _) => Some(f),
            (None, Some(files)) => {
                let file = file::path_for(files, group_dir).map_err(record_err)?;
                file::get(&file).map_err(record_err)?.map(|t| (t, Some(file)))
            }
            (None, None) => None,
        };
        let Some((text, file)) = found else { return Ok(None) };
        let restored = match parse_record(&text) {
            Ok(record) if record.holds(read_high(group_dir)?) => {
                write_high(group_dir, record.previous)?;
                Some(record.previous.text())
            }
            Ok(record) => {
                tracing::warn!(dir = %group_dir.display(), record = %record.text(),
                    "memory.high was changed since a previous agent braked: left as it is");
                None
            }
            Err(msg) => {
                tracing::warn!(dir = %group_dir.display(), %msg, "dropping an unreadable brake record");
                None
            }
        };
        match file {
            Some(f) => file::remove(&f).map_err(record_err)?,
            None => remove_record(group_dir).map_err(record_err)?,
        }
        Ok(restored)
    }

    /// Sets memory.high to at × limit_bytes, remembering the old value (in memory and in the record). If the
    /// group's memory.high is already at or below that (an operator's own, stricter), leave it and say so in the
    /// status (not an error). Writes the record BEFORE writing memory.high.
    pub(crate) fn engage(group_dir: &Path, at: f64, limit_bytes: u64) -> Result<Brake, BrakeError> {
        Self::engage_in(group_dir, at, limit_bytes, file::dir_from_env().as_deref())
    }

    /// [`Brake::engage`], keeping the record in a file in `files` where the directory refuses the attribute.
    pub(crate) fn engage_in(
        group_dir: &Path,
        at: f64,
        limit_bytes: u64,
        files: Option<&Path>,
    ) -> Result<Brake, BrakeError> {
        if !(at > 0.0 && at < 1.0) {
            return Err(BrakeError::Fraction { at });
        }
        // A brake left behind is undone first, so that its value is never taken for the group's own.
        Self::recover_in(group_dir, files)?;
        let file = files.and_then(|f| file::path_for(f, group_dir).ok());
        let mut brake = Brake {
            dir: group_dir.to_path_buf(),
            at,
            page: page_size(),
            previous: High::Max,
            hold: Hold::Stricter(0),
            no_record: None,
            file,
            in_file: false,
            released: false,
        };
        let target = brake.target(limit_bytes)?;
        brake.take(target)?;
        Ok(brake)
    }

    /// The limit changed: move memory.high with it (and the record).
    pub(crate) fn follow_limit(&mut self, limit_bytes: u64) -> Result<(), BrakeError> {
        let target = self.target(limit_bytes)?;
        match self.hold.clone() {
            Hold::LetGo(_) => Ok(()),
            Hold::Stricter(_) => self.take(target),
            Hold::Set(set) if set == target => Ok(()),
            Hold::Set(set) => {
                let current = read_high(&self.dir)?;
                if current != High::Bytes(set) {
                    return self.let_go_to(current);
                }
                if self.previous.at_or_below(target) {
                    write_high(&self.dir, self.previous)?;
                    self.hold = Hold::Stricter(target);
                    return self.drop_record();
                }
                // The record names both values while memory.high moves, so a crash in between is still undone.
                self.write_record(Record { previous: self.previous, set: target, was: Some(set) })?;
                write_high(&self.dir, High::Bytes(target))?;
                self.hold = Hold::Set(target);
                self.write_record(Record { previous: self.previous, set: target, was: None })
            }
        }
    }

    pub fn status(&self) -> BrakeStatus {
        let (high_bytes, error, note) = match &self.hold {
            Hold::Set(b) => (Some(*b), None, None),
            Hold::Stricter(b) => {
                let note = format!(
                    "the group's own memory.high ({}) is at or below the brake's {b}: left as it is",
                    self.previous.text()
                );
                (None, None, Some(note))
            }
            Hold::LetGo(why) => (None, Some(why.clone()), None),
        };
        BrakeStatus {
            at: self.at,
            high_bytes,
            previous: self.previous.text(),
            error,
            note,
            warning: self.no_record.clone(),
        }
    }

    /// Puts the old value back and removes the record. Drop does the same (logging an error) if not called.
    pub fn release(mut self) -> Result<(), BrakeError> {
        self.released = true;
        self.undo()
    }

    fn target(&self, limit_bytes: u64) -> Result<u64, BrakeError> {
        brake_bytes(self.at, limit_bytes, self.page).ok_or(BrakeError::TooLow { at: self.at, limit_bytes })
    }

    /// Not holding memory.high: take the group's own value as the previous one and brake at `target` unless the
    /// group's own is already at or below it.
    fn take(&mut self, target: u64) -> Result<(), BrakeError> {
        self.previous = read_high(&self.dir)?;
        if self.previous.at_or_below(target) {
            self.hold = Hold::Stricter(target);
            return Ok(());
        }
        self.write_record(Record { previous: self.previous, set: target, was: None })?;
        if let Err(e) = write_high(&self.dir, High::Bytes(target)) {
            let _ = self.drop_record();
            return Err(e);
        }
        self.hold = Hold::Set(target);
        Ok(())
    }

    /// Someone else wrote memory.high while braked: theirs stays, the record goes, the brake stops.
    fn let_go_to(&mut self, current: High) -> Result<(), BrakeError> {
        self.hold = Hold::LetGo(format!("memory.high was changed to {} by someone else: left to them", current.text()));
        self.drop_record()
    }

    /// Puts the group's own value back if memory.high still holds the brake's.
    fn undo(&mut self) -> Result<(), BrakeError> {
        let Hold::Set(set) = self.hold else { return Ok(()) };
        let current = match read_high(&self.dir) {
            Err(BrakeError::Io { source, .. }) if gone(&source) => return Ok(()),
            other => other?,
        };
        if current == High::Bytes(set) {
            write_high(&self.dir, self.previous)?;
            self.hold = Hold::Stricter(set);
            self.drop_record()
        } else {
            self.let_go_to(current)
        }
    }

    fn write_record(&mut self, record: Record) -> Result<(), BrakeError> {
        if self.no_record.is_some() {
            return Ok(());
        }
        if let (true, Some(f)) = (self.in_file, &self.file) {
            return file::set(f, &record.text()).map_err(file_err(f));
        }
        match set_record(&self.dir, &record) {
            Ok(()) => Ok(()),
            Err(e) if refused(&e) && self.file.is_some() => {
                let f = self.file.as_deref().unwrap_or(Path::new(""));
                tracing::info!(dir = %self.dir.display(), file = %f.display(),
                    "the group's directory refuses the brake's record ({RECORD_XATTR}: {e}): kept in a file");
                file::set(f, &record.text()).map_err(file_err(f))?;
                self.in_file = true;
                Ok(())
            }
            Err(e) if refused(&e) => {
                self.no_record = Some(format!(
                    "{}: cannot keep the brake's record ({RECORD_XATTR}: {e}): a memory.high left by a killed agent \
                     is not put back at the next start",
                    self.dir.display()
                ));
                Ok(())
            }
            Err(source) => Err(BrakeError::Record { path: self.dir.clone(), source }),
        }
    }

    fn drop_record(&mut self) -> Result<(), BrakeError> {
        if self.no_record.is_some() {
            return Ok(());
        }
        if let (true, Some(f)) = (self.in_file, &self.file) {
            return file::remove(f).map_err(|source| BrakeError::Record { path: f.clone(), source });
        }
        remove_record(&self.dir).map_err(|source| BrakeError::Record { path: self.dir.clone(), source })
    }
}

impl Drop for Brake {
    fn drop(&mut self) {
        if !self.released {
            if let Err(e) = self.undo() {
                tracing::error!(error = %e, "the memory brake could not put memory.high back");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::record::{c_path, RECORD_NAME};
    use super::*;

    /// A ramfs mount standing for a group directory that refuses the record's extended attribute (ramfs keeps
    /// none: EOPNOTSUPP, as the hardened units' root-owned cgroup directory refuses it with EACCES), with a plain
    /// `memory.high`. Unmounted and removed on drop.
    struct Refusing(std::path::PathBuf);

    impl Refusing {
        /// None where ramfs cannot be mounted (not root): a skip of `test` through monitor_tests::require, a
        /// failure in CI.
        fn new(test: &str) -> Option<Refusing> {
            let dir = std::env::temp_dir().join(format!("monitor-brake-{}-{test}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("mkdir");
            let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).expect("path");
            // SAFETY: NUL-terminated strings we own; ramfs takes no data.
            let rc = unsafe { libc::mount(c"ramfs".as_ptr(), c.as_ptr(), c"ramfs".as_ptr(), 0, std::ptr::null()) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                let _ = std::fs::remove_dir(&dir);
                monitor_tests::require(false, test, &format!("mounting ramfs at {} needs root ({e})", dir.display()));
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
        let Some(g) = Refusing::new("where_the_directory_refuses_the_attribute_the_record_is_a_file") else { return };
        let files = std::env::temp_dir().join(format!("monitor-brake-files-{}", std::process::id()));
        std::fs::create_dir_all(&files).expect("mkdir");
        let limit = 512 << 20;
        let brake = Brake::engage_in(&g.0, 0.5, limit, Some(&files)).expect("engage");
        assert_eq!(g.high(), (256u64 << 20).to_string());
        assert_eq!(brake.status().warning, None, "the record is kept");
        let file = file::path_for(&files, &g.0).expect("path");
        assert_eq!(file::get(&file).expect("read").as_deref(), Some("previous=max set=268435456"));
        // As if SIGKILLed: nothing runs on the way out; the next agent finds the file and puts the old value back.
        std::mem::forget(brake);
        assert_eq!(Brake::recover_in(&g.0, Some(&files)).expect("recover").as_deref(), Some("max"));
        assert_eq!(g.high(), "max");
        assert_eq!(file::get(&file).expect("read"), None, "the record goes with the brake");
        // Released at stop: value and file.
        let brake = Brake::engage_in(&g.0, 0.5, limit, Some(&files)).expect("engage again");
        assert!(file::get(&file).expect("read").is_some());
        brake.release().expect("release");
        assert_eq!((g.high().as_str(), file::get(&file).expect("read")), ("max", None));
        // With no place for a file, the brake still works and its status says the record is not kept.
        let brake = Brake::engage_in(&g.0, 0.5, limit, None).expect("engage without a file");
        assert_eq!(g.high(), (256u64 << 20).to_string());
        let warning = brake.status().warning.unwrap_or_default();
        assert!(warning.contains("cannot keep the brake's record"), "{warning}");
        brake.release().expect("release");
        assert_eq!(g.high(), "max");
        let _ = std::fs::remove_dir_all(&files);
    }

    const MIB: u64 = 1 << 20;
    const LIMIT: u64 = 512 * MIB;

    /// A directory standing for a cgroup: a plain `memory.high` file, on a filesystem that keeps `user.*`
    /// extended attributes (tmpfs does; /tmp may be an overlay that does not). Removed on drop.
    struct FakeGroup(PathBuf);

    impl FakeGroup {
        /// None when no candidate filesystem keeps user xattrs (tmpfs keeps them from Linux 6.6): a skip of
        /// `test` through monitor_tests::require, a failure in CI.
        fn new(test: &str, high: &str) -> Option<FakeGroup> {
            let mut reasons = Vec::new();
            for base in [PathBuf::from("/dev/shm"), std::env::temp_dir()] {
                let dir = base.join(format!("monitor-brake-{}-{test}", std::process::id()));
                let _ = std::fs::remove_dir_all(&dir);
                if let Err(e) = std::fs::create_dir(&dir) {
                    reasons.push(format!("{}: {e}", dir.display()));
                    continue;
                }
                let g = FakeGroup(dir);
                g.set_high(high);
                let probe = Record { previous: High::Max, set: 4096, was: None };
                match set_record(&g.0, &probe).and_then(|()| remove_record(&g.0)) {
                    Ok(()) => return Some(g),
                    Err(e) => reasons.push(format!("{}: user xattrs refused: {e}", base.display())),
                }
            }
            let reason = format!("no filesystem here keeps user xattrs (tmpfs does from Linux 6.6): {reasons:?}");
            monitor_tests::require(false, test, &reason);
            None
        }

        fn high(&self) -> String {
            std::fs::read_to_string(self.0.join("memory.high")).expect("memory.high").trim().to_string()
        }

        fn set_high(&self, text: &str) {
            std::fs::write(self.0.join("memory.high"), text).expect("write memory.high");
        }

        fn record(&self) -> Option<Record> {
            get_record(&self.0).expect("getxattr").map(|t| parse_record(&t).expect("a good record"))
        }
    }

    impl Drop for FakeGroup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn bytes(at: f64, limit: u64) -> u64 {
        brake_bytes(at, limit, page_size()).expect("above a page")
    }

    #[test]
    fn brake_bytes_floor_to_a_page() {
        // 0.96 × 512 MiB = 515396075.52 bytes = 125829.12 pages.
        assert_eq!(brake_bytes(0.96, LIMIT, 4096), Some(125829 * 4096));
        assert_eq!(brake_bytes(0.5, 8192, 4096), Some(4096));
        assert_eq!(brake_bytes(0.5, 8191, 4096), None);
        assert_eq!(brake_bytes(0.96, 0, 4096), None);
    }

    #[test]
    fn records_parse_and_print() {
        let r = parse_record("previous=max set=515395584").expect("parse");
        assert_eq!(r, Record { previous: High::Max, set: 515395584, was: None });
        assert_eq!(parse_record(&r.text()), Ok(r));
        let r = parse_record(" set=8192  previous=4096 was=12288\n").expect("parse");
        assert_eq!(r, Record { previous: High::Bytes(4096), set: 8192, was: Some(12288) });
        assert_eq!(parse_record(&r.text()), Ok(r));
        assert!(r.holds(High::Bytes(8192)) && r.holds(High::Bytes(12288)));
        assert!(!r.holds(High::Bytes(4096)) && !r.holds(High::Max));
        for bad in [
            "",
            "previous=max",
            "set=1",
            "previous= set=1",
            "previous=max set=",
            "previous=max set=-1",
            "previous=max set=1.5",
            "previous=none set=1",
            "previous=max set=1 set=2",
            "previous=max set=1 colour=red",
            "previous max set 1",
            "\u{0}\u{ff}garbage",
        ] {
            assert!(parse_record(bad).is_err(), "{bad:?} parsed");
        }
    }

    proptest::proptest! {
        #[test]
        fn record_parser_never_panics(s in "\\PC{0,120}") {
            let _ = parse_record(&s);
        }
    }

    #[test]
    fn engage_follow_release() {
        let Some(g) = FakeGroup::new("engage_follow_release", "max") else { return };
        let mut brake = Brake::engage(&g.0, 0.96, LIMIT).expect("engage");
        let set = bytes(0.96, LIMIT);
        assert_eq!(g.high(), set.to_string());
        assert_eq!(g.record(), Some(Record { previous: High::Max, set, was: None }));
        let s = brake.status();
        assert_eq!(
            (s.high_bytes, s.previous.as_str(), &s.error, &s.note, &s.warning),
            (Some(set), "max", &None, &None, &None)
        );

        brake.follow_limit(256 * MIB).expect("follow down");
        let set = bytes(0.96, 256 * MIB);
        assert_eq!(g.high(), set.to_string());
        assert_eq!(g.record(), Some(Record { previous: High::Max, set, was: None }));
        assert_eq!(brake.status().high_bytes, Some(set));

        brake.release().expect("release");
        assert_eq!(g.high(), "max");
        assert_eq!(g.record(), None);
    }

    #[test]
    fn drop_puts_the_old_value_back() {
        let Some(g) = FakeGroup::new("drop_puts_the_old_value_back", &(600 * MIB).to_string()) else { return };
        let brake = Brake::engage(&g.0, 0.96, LIMIT).expect("engage");
        assert_eq!(g.high(), bytes(0.96, LIMIT).to_string());
        assert_eq!(brake.status().previous, (600 * MIB).to_string());
        drop(brake);
        assert_eq!(g.high(), (600 * MIB).to_string());
        assert_eq!(g.record(), None);
    }

    #[test]
    fn a_killed_agents_brake_is_recovered() {
        let Some(g) = FakeGroup::new("a_killed_agents_brake_is_recovered", "max") else { return };
        // As if SIGKILLed: nothing runs on the way out.
        std::mem::forget(Brake::engage(&g.0, 0.96, LIMIT).expect("engage"));
        assert_eq!(g.high(), bytes(0.96, LIMIT).to_string());
        assert_eq!(Brake::recover(&g.0).expect("recover"), Some("max".to_string()));
        assert_eq!(g.high(), "max");
        assert_eq!(g.record(), None);
        assert_eq!(Brake::recover(&g.0).expect("recover again"), None);

        // Killed between the record and memory.high: nothing was braked, nothing is written.
        set_record(&g.0, &Record { previous: High::Bytes(MIB), set: 400 * MIB, was: None }).expect("setxattr");
        assert_eq!(Brake::recover(&g.0).expect("recover"), None);
        assert_eq!((g.high().as_str(), g.record()), ("max", None));

        // Killed while moving with the limit: memory.high at the old value the record names as `was`.
        let was = Record { previous: High::Max, set: 300 * MIB, was: Some(400 * MIB) };
        set_record(&g.0, &was).expect("setxattr");
        g.set_high(&(400 * MIB).to_string());
        assert_eq!(Brake::recover(&g.0).expect("recover"), Some("max".to_string()));
        assert_eq!(g.high(), "max");

        // Garbage is dropped, memory.high untouched.
        g.set_high(&(400 * MIB).to_string());
        let path = c_path(&g.0).expect("path");
        let junk = b"previous=max set=oops";
        // SAFETY: NUL-terminated names; junk readable for its length.
        let rc = unsafe { libc::setxattr(path.as_ptr(), RECORD_NAME.as_ptr(), junk.as_ptr().cast(), junk.len(), 0) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        assert_eq!(Brake::recover(&g.0).expect("recover"), None);
        assert_eq!((g.high(), g.record()), ((400 * MIB).to_string(), None));
    }

    #[test]
    fn engage_undoes_a_brake_left_behind_first() {
        let Some(g) = FakeGroup::new("engage_undoes_a_brake_left_behind_first", "max") else { return };
        std::mem::forget(Brake::engage(&g.0, 0.96, LIMIT).expect("engage"));
        let brake = Brake::engage(&g.0, 0.97, LIMIT).expect("engage again");
        assert_eq!(brake.status().previous, "max", "the old brake taken for the group's own value");
        brake.release().expect("release");
        assert_eq!(g.high(), "max");
    }

    #[test]
    fn a_stricter_operator_value_is_left_alone() {
        let Some(g) = FakeGroup::new("a_stricter_operator_value_is_left_alone", &(100 * MIB).to_string()) else {
            return;
        };
        let mut brake = Brake::engage(&g.0, 0.96, LIMIT).expect("engage");
        assert_eq!(g.high(), (100 * MIB).to_string());
        assert_eq!(g.record(), None);
        let s = brake.status();
        assert_eq!((s.high_bytes, &s.error), (None, &None));
        assert!(s.note.as_deref().is_some_and(|n| n.contains("left as it is")), "{s:?}");

        // The limit falls below the operator's value: now the brake is the stricter one.
        brake.follow_limit(100 * MIB).expect("follow down");
        let set = bytes(0.96, 100 * MIB);
        assert_eq!(g.high(), set.to_string());
        assert_eq!(g.record(), Some(Record { previous: High::Bytes(100 * MIB), set, was: None }));
        // And back up: the operator's value again.
        brake.follow_limit(LIMIT).expect("follow up");
        assert_eq!((g.high(), g.record()), ((100 * MIB).to_string(), None));
        brake.release().expect("release");
        assert_eq!(g.high(), (100 * MIB).to_string());
    }

    #[test]
    fn a_value_someone_else_wrote_is_theirs() {
        let Some(g) = FakeGroup::new("a_value_someone_else_wrote_is_theirs", "max") else { return };
        // Changed after a killed agent braked: recover leaves it.
        std::mem::forget(Brake::engage(&g.0, 0.96, LIMIT).expect("engage"));
        g.set_high(&(300 * MIB).to_string());
        assert_eq!(Brake::recover(&g.0).expect("recover"), None);
        assert_eq!((g.high(), g.record()), ((300 * MIB).to_string(), None));

        // Changed while this agent brakes: following the limit lets go, release leaves it.
        g.set_high("max");
        let mut brake = Brake::engage(&g.0, 0.96, LIMIT).expect("engage");
        g.set_high(&(200 * MIB).to_string());
        brake.follow_limit(256 * MIB).expect("follow");
        let s = brake.status();
        assert_eq!(s.high_bytes, None);
        assert!(s.error.as_deref().is_some_and(|e| e.contains("someone else")), "{s:?}");
        assert_eq!(g.record(), None);
        brake.release().expect("release");
        assert_eq!(g.high(), (200 * MIB).to_string());

        // Changed and not noticed before release: release leaves it too.
        g.set_high("max");
        let brake = Brake::engage(&g.0, 0.96, LIMIT).expect("engage");
        g.set_high(&(250 * MIB).to_string());
        brake.release().expect("release");
        assert_eq!((g.high(), g.record()), ((250 * MIB).to_string(), None));
    }

    #[test]
    fn bad_fractions_and_missing_files_are_errors() {
        let dir = PathBuf::from("/nonexistent/monitor-brake");
        assert!(matches!(Brake::engage(&dir, 1.0, LIMIT), Err(BrakeError::Fraction { .. })));
        assert!(matches!(Brake::engage(&dir, f64::NAN, LIMIT), Err(BrakeError::Fraction { .. })));
        let err = Brake::engage(&dir, 0.96, LIMIT).expect_err("no group");
        assert!(err.to_string().contains("/nonexistent/monitor-brake"), "{err}");
        let Some(g) = FakeGroup::new("bad_fractions_and_missing_files_are_errors", "max") else { return };
        assert!(matches!(Brake::engage(&g.0, 0.96, 4096), Err(BrakeError::TooLow { .. })));
        g.set_high("lots");
        let err = Brake::engage(&g.0, 0.96, LIMIT).expect_err("garbage memory.high");
        assert!(matches!(err, BrakeError::Parse { .. }) && err.to_string().contains("memory.high"), "{err}");
    }
}
