//! `Hooks`: the kernel hook sets that can carry the request-counting programs, by the names the config
//! (`[probes] hooks`) and `/api/v1/status` (`probes.hooks`) use. The probes module attaches them and says which
//! set to try first and next; the names live here so that the config checks them when the file is parsed.

use serde::{Deserialize, Serialize};

/// Where the syscall sets hook `close` (at entry both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseHook {
    /// `close_enter` on the tracepoint `syscalls/sys_enter_close` (the probes' `attach::CLOSE`).
    Tracepoint,
    /// `raw_close_enter` on the raw tracepoint `sys_enter` (the probes' `attach::RAW_CLOSE`).
    RawSysEnter,
}

impl CloseHook {
    /// The name the status and the logs use.
    pub fn name(self) -> &'static str {
        match self {
            CloseHook::Tracepoint => "tracepoint",
            CloseHook::RawSysEnter => "raw_sys_enter",
        }
    }
}

/// Which kernel hooks carry the programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hooks {
    /// Three raw tracepoints of the socket layer (`sock_recv_length`, `sock_send_length`, `inet_sock_set_state`;
    /// 6.3+, x86_64): they fire only for socket reads, writes and TCP state changes, so no syscall of any process
    /// is slowed. The default where the kernel has them.
    Sock,
    /// The raw tracepoint `sys_exit` (program `sys_exit`: every syscall exit, arguments from the saved x86_64
    /// registers) plus `close_enter` on `syscalls/sys_enter_close`. Puts every syscall of the host on the slow
    /// path: the fallback for kernels without the socket tracepoints.
    RawSysExit,
    /// One tracepoint program per syscall entry and exit (22 `syscalls/*` tracepoints, the `PENDING` map
    /// carrying the arguments from entry to exit). The last fallback.
    Tracepoints,
}

impl Hooks {
    pub const ALL: [Hooks; 3] = [Hooks::Sock, Hooks::RawSysExit, Hooks::Tracepoints];

    /// The name the config and `/api/v1/status` use (`probes.hooks`).
    pub fn name(self) -> &'static str {
        match self {
            Hooks::Sock => "sock",
            Hooks::RawSysExit => "raw_sys_exit",
            Hooks::Tracepoints => "tracepoints",
        }
    }

    /// The set named `name` ([`Hooks::name`]).
    pub fn from_name(name: &str) -> Option<Hooks> {
        Hooks::ALL.into_iter().find(|h| h.name() == name)
    }
}

impl std::fmt::Display for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// `[probes] hooks`: `auto` (the preferred set, falling back to the next ones), or one set by name with no
/// fallback.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum HooksChoice {
    #[default]
    Auto,
    Only(Hooks),
}

impl HooksChoice {
    /// The set named, or `None` for `auto`.
    pub fn only(self) -> Option<Hooks> {
        match self {
            HooksChoice::Auto => None,
            HooksChoice::Only(h) => Some(h),
        }
    }
}

impl TryFrom<String> for HooksChoice {
    type Error = String;

    fn try_from(name: String) -> Result<HooksChoice, String> {
        if name == "auto" {
            return Ok(HooksChoice::Auto);
        }
        Hooks::from_name(&name)
            .map(HooksChoice::Only)
            .ok_or_else(|| format!("{name:?} is not one of \"auto\", \"sock\", \"raw_sys_exit\", \"tracepoints\""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::err;
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn names_round_trip() {
        for h in Hooks::ALL {
            assert_eq!(Hooks::from_name(h.name()), Some(h));
            assert_eq!(serde_json::to_string(&h).expect("json"), format!("{:?}", h.name()));
        }
        assert_eq!(Hooks::from_name("kprobe"), None);
    }

    #[test]
    fn auto_or_one_set() {
        let load = |t: &str| Config::from_toml(t, Path::new("m.toml")).expect("valid").probes.hooks;
        assert_eq!(load(""), HooksChoice::Auto);
        assert_eq!(load("[probes]\nhooks = \"auto\"\n"), HooksChoice::Auto);
        assert_eq!(load("[probes]\nhooks = \"raw_sys_exit\"\n").only(), Some(Hooks::RawSysExit));
    }

    #[test]
    fn a_bad_name_is_a_parse_error_at_its_key_and_line() {
        let e = err("[probes]\nenabled = true\nhooks = \"kprobe\"\n");
        assert!(e.starts_with("m.toml:3: probes.hooks: \"kprobe\" is not one of \"auto\", \"sock\""), "{e}");
    }
}
