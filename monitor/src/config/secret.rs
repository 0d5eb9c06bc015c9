//! Reads the files that hold secrets (`[actions] secret_file`, `[cluster] secret_file`, `[alerts]
//! bearer_token_file` and `basic_auth.password_file`), refusing one that others could read or replace, as ssh does
//! for a private key: it must be owned by root or by the user monitor runs as, with no permission for its group or
//! others (mode 0600 or 0400). The error names the file, its mode or owner and the command that fixes it.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The contents of the secret file `path`, less a trailing newline, once its owner and mode are checked (on the
/// open file, so a file swapped in between is not read). An error names the file.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, String> {
    let mut f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let meta = f.metadata().map_err(|e| format!("{}: {e}", path.display()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    kept_secret(path, meta.mode(), meta.uid(), euid)?;
    let mut b = Vec::new();
    f.read_to_end(&mut b).map_err(|e| format!("{}: {e}", path.display()))?;
    while b.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
        b.pop();
    }
    Ok(b)
}

/// Whether a file of `mode`, owned by `owner`, keeps a secret from every user but root and `euid` (the user monitor
/// runs as); an error says why not and the command that fixes it.
pub(crate) fn kept_secret(path: &Path, mode: u32, owner: u32, euid: u32) -> Result<(), String> {
    let shown = path.display();
    let mode = mode & 0o7777;
    if mode & 0o077 != 0 {
        let why = if mode & 0o004 != 0 {
            "readable by others"
        } else if mode & 0o040 != 0 {
            "readable by its group"
        } else if mode & 0o002 != 0 {
            "writable by others"
        } else if mode & 0o020 != 0 {
            "writable by its group"
        } else {
            "open to its group or others"
        };
        return Err(format!("{shown} is mode {mode:04o} ({why}): run chmod 600 {}", shell_word(path)));
    }
    if owner != 0 && owner != euid {
        let whose = if euid == 0 { "root".to_string() } else { format!("root or uid {euid} that monitor runs as") };
        return Err(format!("{shown} is owned by uid {owner}, not {whose}: run chown root {}", shell_word(path)));
    }
    Ok(())
}

/// Writes a secret file as it should be: mode 0600, owned by whoever writes it (for tests).
#[cfg(test)]
pub(crate) fn write_for_test(path: &Path, text: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.write_all(text.as_bytes()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// `path` as one shell word: as is when it is plain, else in single quotes.
fn shell_word(path: &Path) -> String {
    let s = path.display().to_string();
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+,:@".contains(c)) {
        s
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const PATH: &str = "/etc/monitor/action.secret";

    fn check(mode: u32, owner: u32, euid: u32) -> Result<(), String> {
        kept_secret(Path::new(PATH), mode, owner, euid)
    }

    #[test]
    fn only_the_owner_may_read_a_secret() {
        // Modes as st_mode has them: a regular file's type bits above the permissions.
        for mode in [0o100600, 0o100400, 0o600, 0o700] {
            assert_eq!(check(mode, 0, 0), Ok(()), "{mode:o}");
        }
        let refused = [
            (0o100644, "mode 0644 (readable by others)"),
            (0o100640, "mode 0640 (readable by its group)"),
            (0o100604, "mode 0604 (readable by others)"),
            (0o100620, "mode 0620 (writable by its group)"),
            (0o100602, "mode 0602 (writable by others)"),
            (0o100610, "mode 0610 (open to its group or others)"),
        ];
        for (mode, says) in refused {
            let want = format!("{PATH} is {says}: run chmod 600 {PATH}");
            assert_eq!(check(mode, 0, 0), Err(want), "{mode:o}");
        }
    }

    #[test]
    fn a_secret_is_owned_by_root_or_the_agents_user() {
        assert_eq!(check(0o600, 0, 998), Ok(()), "root's, read by the packaged agent (CAP_DAC_READ_SEARCH)");
        assert_eq!(check(0o600, 998, 998), Ok(()), "the agent's user's own");
        let e = check(0o600, 65534, 0);
        assert_eq!(e, Err(format!("{PATH} is owned by uid 65534, not root: run chown root {PATH}")));
        let e = check(0o600, 65534, 998);
        let want =
            format!("{PATH} is owned by uid 65534, not root or uid 998 that monitor runs as: run chown root {PATH}");
        assert_eq!(e, Err(want));
    }

    #[test]
    fn the_fix_quotes_an_unusual_path() {
        let e = kept_secret(Path::new("/etc/my secrets/it's"), 0o644, 0, 0);
        assert!(e.is_err_and(|e| e.ends_with(r"run chmod 600 '/etc/my secrets/it'\''s'")));
    }

    /// A file of `mode` holding `text` in a directory of its own.
    fn file(tag: &str, text: &str, mode: u32) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("monitor-secret-{}-{tag}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let f = dir.join("secret");
        std::fs::write(&f, text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        f
    }

    #[test]
    fn a_secret_file_is_read_only_when_kept_secret() {
        let f = file("modes", "k\n", 0o600);
        assert_eq!(read(&f), Ok(b"k".to_vec()), "the newline is not part of it");
        for mode in [0o640, 0o644, 0o604] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap_or_else(|e| panic!("{e}"));
            let e = read(&f);
            let says = format!("is mode {mode:04o} (");
            assert!(e.as_ref().is_err_and(|e| e.contains(&says) && e.contains("run chmod 600")), "{mode:o}: {e:?}");
        }
        let missing = f.with_file_name("missing");
        assert!(read(&missing).is_err_and(|e| e.starts_with(&missing.display().to_string())));
        let _ = f.parent().map(std::fs::remove_dir_all);
    }

    #[test]
    fn a_secret_file_of_another_user_is_refused() {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("CI").is_none(), "CI runs the unit tests as root");
            eprintln!("skipping a_secret_file_of_another_user_is_refused: not root (chown needs it)");
            return;
        }
        let f = file("owner", "k\n", 0o600);
        let nobody = crate::base::accounts::user_by_name("nobody").ok().flatten().map_or(65534, |u| u.uid);
        std::os::unix::fs::chown(&f, Some(nobody), None).unwrap_or_else(|e| panic!("chown: {e}"));
        let e = read(&f);
        let says = format!("is owned by uid {nobody}, not root: run chown root {}", f.display());
        assert!(e.as_ref().is_err_and(|e| e.ends_with(&says)), "{e:?}");
        let _ = f.parent().map(std::fs::remove_dir_all);
    }
}
