//! The brake's record: what it set and what was there before, as text (`previous=<max|bytes> set=<bytes>`, and
//! ` was=<bytes>` while the limit moves), kept in the extended attribute `user.monitor.brake` on the group's
//! directory (or, where the directory refuses it, in a file: [`super::file`]).

use super::High;
use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The extended attribute holding the record on the group's directory.
pub const RECORD_XATTR: &str = "user.monitor.brake";
pub(super) const RECORD_NAME: &CStr = c"user.monitor.brake";

/// What the brake set and what was there before. `was` is the value being moved from while the limit moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub previous: High,
    pub set: u64,
    pub was: Option<u64>,
}

impl Record {
    pub fn text(&self) -> String {
        let mut t = format!("previous={} set={}", self.previous.text(), self.set);
        if let Some(w) = self.was {
            t.push_str(&format!(" was={w}"));
        }
        t
    }

    /// Whether `memory.high` still holds what the brake set.
    pub fn holds(&self, high: High) -> bool {
        high == High::Bytes(self.set) || self.was.is_some_and(|w| high == High::Bytes(w))
    }
}

/// Parses a record: `previous=<max|bytes> set=<bytes>`, optionally ` was=<bytes>`, each key once.
pub fn parse_record(text: &str) -> Result<Record, String> {
    let (mut previous, mut set, mut was) = (None, None, None);
    for word in text.split_ascii_whitespace() {
        let (key, value) = word.split_once('=').ok_or_else(|| format!("{word:?} is not key=value"))?;
        let bytes = || value.parse::<u64>().map_err(|_| format!("{key}: {value:?} is not a number of bytes"));
        let slot_taken = match key {
            "previous" => previous.replace(High::parse(value).ok_or_else(|| format!("previous: {value:?}"))?),
            "set" => set.replace(bytes()?).map(High::Bytes),
            "was" => was.replace(bytes()?).map(High::Bytes),
            _ => return Err(format!("unknown key {key:?}")),
        };
        if slot_taken.is_some() {
            return Err(format!("{key} given twice"));
        }
    }
    match (previous, set) {
        (Some(previous), Some(set)) => Ok(Record { previous, set, was }),
        _ => Err(format!("needs previous= and set=: {text:?}")),
    }
}

pub(super) fn c_path(dir: &Path) -> io::Result<CString> {
    CString::new(dir.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

pub(super) fn get_record(dir: &Path) -> io::Result<Option<String>> {
    let path = c_path(dir)?;
    let mut buf = [0u8; 256];
    // SAFETY: both names are NUL-terminated C strings; buf is writable for buf.len() bytes.
    let n = unsafe { libc::getxattr(path.as_ptr(), RECORD_NAME.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENODATA) { Ok(None) } else { Err(e) };
    }
    Ok(Some(String::from_utf8_lossy(&buf[..n as usize]).into_owned()))
}

pub(super) fn set_record(dir: &Path, record: &Record) -> io::Result<()> {
    let (path, text) = (c_path(dir)?, record.text());
    // SAFETY: both names are NUL-terminated C strings; text is readable for text.len() bytes.
    let rc = unsafe { libc::setxattr(path.as_ptr(), RECORD_NAME.as_ptr(), text.as_ptr().cast(), text.len(), 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(super) fn remove_record(dir: &Path) -> io::Result<()> {
    let path = c_path(dir)?;
    // SAFETY: both names are NUL-terminated C strings.
    let rc = unsafe { libc::removexattr(path.as_ptr(), RECORD_NAME.as_ptr()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENODATA) {
            return Err(e);
        }
    }
    Ok(())
}
