//! The host's users and groups, read through libc (so NSS sources such as LDAP count as they do for a login), and
//! the credentials a `[[process]]` with `user`/`group` is started with: its uid, its primary gid, and its
//! supplementary groups (the user's groups, as `initgroups` would set them; none but the gid without a user).

use serde::de::{self, Deserializer, Visitor};
use std::ffi::{CStr, CString};
use std::io;
use std::path::PathBuf;

/// A user or group as the config names it: a name (`"nobody"`) or a numeric id (`65534`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Account {
    Name(String),
    Id(u32),
}

impl std::fmt::Display for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Account::Name(n) => write!(f, "{n:?}"),
            Account::Id(id) => write!(f, "{id}"),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Account {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Account, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Account;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a name or a numeric id")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Account, E> {
                if s.is_empty() || s.contains(['\0', ':']) {
                    return Err(E::custom(format!("{s:?} is not a user or group name")));
                }
                Ok(Account::Name(s.to_string()))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Account, E> {
                u32::try_from(n)
                    .ok()
                    .filter(|&n| n != u32::MAX)
                    .map(Account::Id)
                    .ok_or_else(|| E::custom(format!("{n} is not an id (0..{})", u32::MAX)))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Account, E> {
                self.visit_i64(i64::try_from(n).unwrap_or(-1))
            }
        }
        d.deserialize_any(V)
    }
}

/// A user of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    /// The primary group.
    pub gid: u32,
    pub home: PathBuf,
}

/// Why credentials cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("no user {0} on this host")]
    NoUser(Account),
    #[error("no group {0} on this host")]
    NoGroup(Account),
    /// A numeric uid without a user entry has no primary group to take.
    #[error("uid {0} has no user entry, so no primary group: set `group` too")]
    NoPrimaryGroup(u32),
    #[error("reading the user database for {what}: {source}")]
    Lookup { what: String, source: io::Error },
    /// Only root (or a holder of CAP_SETUID and CAP_SETGID) can start a process as someone else.
    #[error("monitor runs as uid {uid} gid {gid}, not root: it cannot start a process as uid {want_uid} gid {want_gid}; run it as root, or as that user without `user`/`group`")]
    NotPermitted { uid: u32, gid: u32, want_uid: u32, want_gid: u32 },
}

impl AccountError {
    /// The `[[process]]` key the error is about: `user` or `group`.
    pub fn key(&self) -> &'static str {
        match self {
            AccountError::NoGroup(_) => "group",
            _ => "user",
        }
    }
}

/// What a process is started as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    /// None: the launcher's own uid (only `group` was given).
    pub uid: Option<u32>,
    pub gid: u32,
    /// The supplementary groups (the user's; only `gid` when no user was given).
    pub groups: Vec<u32>,
    /// The user's entry, for `HOME`, `USER` and `LOGNAME`.
    pub user: Option<User>,
}

/// The credentials of `user` and `group` (either may be absent; both absent: None, the launcher's own).
pub fn resolve(user: Option<&Account>, group: Option<&Account>) -> Result<Option<Credentials>, AccountError> {
    if user.is_none() && group.is_none() {
        return Ok(None);
    }
    let entry = match user {
        None => None,
        Some(a) => {
            let found = match a {
                Account::Name(n) => user_by_name(n),
                Account::Id(id) => user_by_id(*id),
            };
            match found.map_err(|source| AccountError::Lookup { what: format!("user {a}"), source })? {
                Some(u) => Some(u),
                None if matches!(a, Account::Id(_)) => None,
                None => return Err(AccountError::NoUser(a.clone())),
            }
        }
    };
    let gid = match group {
        Some(Account::Id(id)) => *id,
        Some(a @ Account::Name(n)) => group_by_name(n)
            .map_err(|source| AccountError::Lookup { what: format!("group {a}"), source })?
            .ok_or_else(|| AccountError::NoGroup(a.clone()))?,
        None => match (&entry, user) {
            (Some(u), _) => u.gid,
            (None, Some(Account::Id(uid))) => return Err(AccountError::NoPrimaryGroup(*uid)),
            // A named user without an entry was an error above; no user and no group returned None.
            (None, _) => return Ok(None),
        },
    };
    let uid = match (&entry, user) {
        (Some(u), _) => Some(u.uid),
        (None, Some(Account::Id(id))) => Some(*id),
        _ => None,
    };
    let groups = match &entry {
        Some(u) => group_list(&u.name, gid).map_err(|source| AccountError::Lookup { what: u.name.clone(), source })?,
        None => vec![gid],
    };
    Ok(Some(Credentials { uid, gid, groups, user: entry }))
}

/// Whether this process may start one with `c`: root may; anyone else only as itself (then nothing changes).
/// Returns whether the credentials must be switched in the child.
pub(crate) fn must_switch(c: &Credentials) -> Result<bool, AccountError> {
    // SAFETY: geteuid and getegid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if uid == 0 {
        return Ok(true);
    }
    let want_uid = c.uid.unwrap_or(uid);
    if want_uid == uid && c.gid == gid {
        return Ok(false);
    }
    Err(AccountError::NotPermitted { uid, gid, want_uid, want_gid: c.gid })
}

/// The buffer size the `*_r` lookups start with (doubled on ERANGE).
const START_BUF: usize = 1024;
/// The largest buffer tried (a group with very many members).
const MAX_BUF: usize = 1 << 20;

/// Calls a `get*_r` lookup with a growing buffer. Returns the buffer the entry's strings point into (keep it until
/// they are copied), or None when there is no entry.
fn lookup<T>(
    mut call: impl FnMut(&mut [libc::c_char], &mut *mut T) -> libc::c_int,
) -> io::Result<Option<Vec<libc::c_char>>> {
    let mut buf = vec![0 as libc::c_char; START_BUF];
    loop {
        let mut result: *mut T = std::ptr::null_mut();
        let rc = call(&mut buf, &mut result);
        if rc == libc::ERANGE && buf.len() < MAX_BUF {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        // "Not found" is rc 0 with a null result; some NSS modules report ENOENT and the like instead.
        return match rc {
            0 => Ok((!result.is_null()).then_some(buf)),
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => Ok(None),
            e => Err(io::Error::from_raw_os_error(e)),
        };
    }
}

/// The user of a passwd entry whose strings point into `_buf`.
fn user_of(pw: &libc::passwd, _buf: Vec<libc::c_char>) -> User {
    // SAFETY: a passwd filled by getpw*_r holds NUL-terminated strings in `_buf`, alive until this returns.
    let text = |p: *const libc::c_char| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    User { name: text(pw.pw_name), uid: pw.pw_uid, gid: pw.pw_gid, home: PathBuf::from(text(pw.pw_dir)) }
}

/// The user named `name`, if any.
pub(crate) fn user_by_name(name: &str) -> io::Result<Option<User>> {
    let Ok(c) = CString::new(name) else { return Ok(None) };
    // SAFETY: zeroed passwd is a valid value of a plain C struct.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let found = lookup(|buf, result| {
        // SAFETY: every pointer is valid for the call; the buffer's length is passed with it.
        unsafe { libc::getpwnam_r(c.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), result) }
    })?;
    Ok(found.map(|buf| user_of(&pw, buf)))
}

/// The user with `uid`, if any.
pub(crate) fn user_by_id(uid: u32) -> io::Result<Option<User>> {
    // SAFETY: zeroed passwd is a valid value of a plain C struct.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let found = lookup(|buf, result| {
        // SAFETY: every pointer is valid for the call; the buffer's length is passed with it.
        unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), result) }
    })?;
    Ok(found.map(|buf| user_of(&pw, buf)))
}

/// The gid of the group named `name`, if any.
pub(crate) fn group_by_name(name: &str) -> io::Result<Option<u32>> {
    let Ok(c) = CString::new(name) else { return Ok(None) };
    // SAFETY: zeroed group is a valid value of a plain C struct.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let found = lookup(|buf, result| {
        // SAFETY: every pointer is valid for the call; the buffer's length is passed with it.
        unsafe { libc::getgrnam_r(c.as_ptr(), &mut gr, buf.as_mut_ptr(), buf.len(), result) }
    })?;
    Ok(found.map(|_| gr.gr_gid))
}

/// The groups of user `name` whose primary group is `gid` (`gid` included), as `initgroups` sets them.
pub(crate) fn group_list(name: &str, gid: u32) -> io::Result<Vec<u32>> {
    let c = CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut n: libc::c_int = 32;
    loop {
        let mut groups = vec![0 as libc::gid_t; usize::try_from(n).unwrap_or(32)];
        let mut count = n;
        // SAFETY: `groups` holds `count` gids; getgrouplist writes at most that many and sets `count`.
        let rc = unsafe { libc::getgrouplist(c.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(usize::try_from(count).unwrap_or(0));
            return Ok(groups);
        }
        if count <= n || count > 65_536 {
            return Err(io::Error::other("getgrouplist failed"));
        }
        n = count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct T {
        a: Account,
    }

    fn parse(text: &str) -> Result<Account, String> {
        toml::from_str::<T>(text).map(|t| t.a).map_err(|e| e.to_string())
    }

    #[test]
    fn an_account_is_a_name_or_an_id() {
        assert_eq!(parse("a = \"nobody\""), Ok(Account::Name("nobody".into())));
        assert_eq!(parse("a = 65534"), Ok(Account::Id(65534)));
        for bad in ["a = -1", "a = 4294967295", "a = \"\"", "a = \"x:y\"", "a = 1.5", "a = true"] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn root_is_found_by_name_and_id() {
        let by_name = user_by_name("root").ok().flatten();
        assert_eq!(by_name.as_ref().map(|u| (u.uid, u.gid)), Some((0, 0)));
        assert_eq!(user_by_id(0).ok().flatten().map(|u| u.name), Some("root".to_string()));
        assert_eq!(group_by_name("root").ok().flatten(), Some(0));
    }

    #[test]
    fn unknown_names_are_errors_naming_their_key() {
        let name = Account::Name("no-such-user-for-monitor".into());
        let e = resolve(Some(&name), None).err().map(|e| (e.key(), e.to_string()));
        assert_eq!(e, Some(("user", "no user \"no-such-user-for-monitor\" on this host".to_string())));
        let e = resolve(None, Some(&name)).err().map(|e| e.key());
        assert_eq!(e, Some("group"));
        let e = resolve(Some(&Account::Id(4_000_000)), None).err().map(|e| e.to_string());
        assert_eq!(e, Some("uid 4000000 has no user entry, so no primary group: set `group` too".to_string()));
    }

    #[test]
    fn a_user_brings_its_primary_group_and_its_groups() {
        let c = resolve(Some(&Account::Name("root".into())), None).ok().flatten();
        let c = c.unwrap_or_else(|| panic!("root resolves"));
        assert_eq!((c.uid, c.gid), (Some(0), 0));
        assert!(c.groups.contains(&0), "{:?}", c.groups);
        let c = resolve(Some(&Account::Id(4_000_000)), Some(&Account::Id(4_000_001))).ok().flatten();
        assert_eq!(c.map(|c| (c.uid, c.gid, c.groups)), Some((Some(4_000_000), 4_000_001, vec![4_000_001])));
        let c = resolve(None, Some(&Account::Id(5))).ok().flatten();
        assert_eq!(c.map(|c| (c.uid, c.gid, c.groups)), Some((None, 5, vec![5])));
        assert_eq!(resolve(None, None).ok().flatten(), None);
    }
}
