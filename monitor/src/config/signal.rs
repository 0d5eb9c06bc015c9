//! `Signal`: a signal named in the config (`[actions] refuse_signal = "SIGUSR1"`), checked against the few a
//! server is told with when the file is parsed, and carrying its number for the actions that send it.

use serde::Deserialize;

/// The signals the config accepts, by name without `SIG`, with their numbers.
const NAMES: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("TERM", libc::SIGTERM),
    ("CONT", libc::SIGCONT),
    ("WINCH", libc::SIGWINCH),
    ("URG", libc::SIGURG),
];

/// A signal the config may name: `SIGUSR1` or `USR1`, one of [`NAMES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Signal(i32);

impl Signal {
    /// The signal named `SIGUSR1` or `USR1`, if it is one the config accepts.
    pub fn from_name(name: &str) -> Option<Signal> {
        let bare = name.strip_prefix("SIG").unwrap_or(name);
        NAMES.iter().find(|(n, _)| *n == bare).map(|&(_, s)| Signal(s))
    }

    /// The signal with number `n`, if it is one the config accepts.
    pub(crate) fn from_number(n: i32) -> Option<Signal> {
        NAMES.iter().any(|&(_, s)| s == n).then_some(Signal(n))
    }

    /// Its number, for `kill` and `pidfd_send_signal`.
    pub fn number(self) -> i32 {
        self.0
    }

    /// Its name without `SIG` (`USR1`), for the log.
    pub fn name(self) -> &'static str {
        NAMES.iter().find(|&&(_, s)| s == self.0).map_or("?", |(n, _)| n)
    }
}

impl TryFrom<String> for Signal {
    type Error = String;

    fn try_from(name: String) -> Result<Signal, String> {
        Signal::from_name(&name).ok_or_else(|| {
            let all: Vec<String> = NAMES.iter().map(|(n, _)| format!("SIG{n}")).collect();
            format!("{name:?} is not one of {}", all.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::err;
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn names_with_or_without_sig() {
        assert_eq!(Signal::from_name("SIGUSR1").map(Signal::number), Some(libc::SIGUSR1));
        assert_eq!(Signal::from_name("USR2").map(Signal::number), Some(libc::SIGUSR2));
        assert_eq!(Signal::from_name("SIGSEGV"), None);
        assert_eq!(Signal::from_name("usr1"), None);
        assert_eq!(Signal::from_number(libc::SIGTERM).map(Signal::name), Some("TERM"));
        assert_eq!(Signal::from_number(libc::SIGSEGV), None);
    }

    #[test]
    fn parsed_from_the_file() {
        let c =
            Config::from_toml("[actions]\nrefuse_signal = \"SIGUSR1\"\nserve_signal = \"HUP\"\n", Path::new("m.toml"))
                .expect("valid signals");
        assert_eq!(c.actions.refuse_signal.map(Signal::number), Some(libc::SIGUSR1));
        assert_eq!(c.actions.serve_signal.map(Signal::number), Some(libc::SIGHUP));
        assert_eq!(c.actions.abort_signal, None);
    }

    #[test]
    fn a_bad_name_is_a_parse_error_at_its_key_and_line() {
        let e = err("[actions]\nrefuse_signal = \"SIGUSR1\"\nabort_signal = \"SIGSEGV\"\n");
        assert!(e.starts_with("m.toml:3: actions.abort_signal: \"SIGSEGV\" is not one of SIGHUP,"), "{e}");
        let e = err("[actions]\nserve_signal = 1\n");
        assert!(e.starts_with("m.toml:2: actions.serve_signal:"), "{e}");
    }
}
