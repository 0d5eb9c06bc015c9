//! What the agent may do when it does not run as root: its effective capabilities (`CapEff:` of
//! `/proc/self/status`), and for each configured feature whose capability is missing, one warning at start that
//! names the feature, the capability and the effect. The probes' disabled reason names it too.
//!
//! An unprivileged agent needs CAP_BPF and CAP_PERFMON for the probes (and CAP_DAC_READ_SEARCH where tracefs is
//! root's with mode 0700, as `ls -ld /sys/kernel/tracing` shows; CAP_SYS_ADMIN to mount it), CAP_KILL for signal
//! actions to processes of other users, CAP_SYS_PTRACE to read other users' `/proc/<pid>/fd` (the port of `[actions]
//! admin_path`), and write access to the group's `memory.high` for the brake. `grep CapEff /proc/<pid>/status` shows
//! what a running agent has; `capsh --decode=<hex>` names the bits.

use crate::config::Config;
use std::path::Path;

/// A capability the agent's features use (its bit number in `CapEff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cap {
    DacReadSearch = 2,
    Kill = 5,
    SysPtrace = 19,
    SysAdmin = 21,
    Perfmon = 38,
    Bpf = 39,
}

impl Cap {
    pub fn name(self) -> &'static str {
        match self {
            Cap::DacReadSearch => "CAP_DAC_READ_SEARCH",
            Cap::Kill => "CAP_KILL",
            Cap::SysPtrace => "CAP_SYS_PTRACE",
            Cap::SysAdmin => "CAP_SYS_ADMIN",
            Cap::Perfmon => "CAP_PERFMON",
            Cap::Bpf => "CAP_BPF",
        }
    }
}

/// Why `/proc/self/status` could not be read as credentials.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrivilegeError {
    #[error("reading /proc/self/status: {0}")]
    Read(#[from] std::io::Error),
    #[error("/proc/self/status: no {0} line")]
    Missing(&'static str),
    #[error("/proc/self/status: bad {key} line {line:?}")]
    Bad { key: &'static str, line: String },
}

/// The effective uid and capabilities of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Privileges {
    pub euid: u32,
    /// The `CapEff` bit set.
    pub effective: u64,
}

impl Privileges {
    /// Whether the capability is in the effective set.
    pub fn has(&self, cap: Cap) -> bool {
        self.effective & (1u64 << cap as u32) != 0
    }

    /// The capabilities of `caps` this process lacks (none as root: its features are not checked).
    fn lacks(&self, caps: &[Cap]) -> Vec<Cap> {
        match self.euid {
            0 => Vec::new(),
            _ => caps.iter().copied().filter(|&c| !self.has(c)).collect(),
        }
    }

    /// The capabilities the probes lack: CAP_BPF and CAP_PERFMON (unless CAP_SYS_ADMIN, which covers both), and
    /// when tracefs's events cannot be reached, CAP_DAC_READ_SEARCH to read them, or with it CAP_SYS_ADMIN to
    /// mount tracefs.
    fn probes_lack(&self, tracefs_reachable: bool) -> Vec<Cap> {
        let mut lack = match self.has(Cap::SysAdmin) {
            true => Vec::new(),
            false => self.lacks(&[Cap::Bpf, Cap::Perfmon]),
        };
        if !tracefs_reachable && self.euid != 0 {
            match self.has(Cap::DacReadSearch) {
                false => lack.push(Cap::DacReadSearch),
                true if !self.has(Cap::SysAdmin) => lack.push(Cap::SysAdmin),
                true => {}
            }
        }
        lack
    }
}

/// The effective uid (the second field of `Uid:`) and `CapEff:` of a `/proc/<pid>/status` text.
pub(crate) fn parse_status(text: &str) -> Result<Privileges, PrivilegeError> {
    let line = |key: &'static str| {
        text.lines().find_map(|l| l.strip_prefix(key)).map(str::trim).ok_or(PrivilegeError::Missing(key))
    };
    let uid = line("Uid:")?;
    let euid = uid
        .split_whitespace()
        .nth(1)
        .and_then(|u| u.parse().ok())
        .ok_or_else(|| PrivilegeError::Bad { key: "Uid:", line: uid.to_string() })?;
    let cap = line("CapEff:")?;
    let effective =
        u64::from_str_radix(cap, 16).map_err(|_| PrivilegeError::Bad { key: "CapEff:", line: cap.to_string() })?;
    Ok(Privileges { euid, effective })
}

/// This process's privileges.
pub fn current() -> Result<Privileges, PrivilegeError> {
    parse_status(&std::fs::read_to_string("/proc/self/status")?)
}

/// A configured feature that is off, or half off, for want of a privilege.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// `probes`, `signal actions`, `admin_path actions`, `brake`.
    pub feature: &'static str,
    /// What is missing (`CAP_BPF and CAP_PERFMON`, `write access to …/memory.high`).
    pub lacks: String,
    /// What it means for the operator.
    pub effect: &'static str,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} off: {} missing; {}", self.feature, self.lacks, self.effect)
    }
}

/// `CAP_A`, `CAP_A and CAP_B`, `CAP_A, CAP_B and CAP_C`.
fn names(caps: &[Cap]) -> String {
    let names: Vec<&str> = caps.iter().map(|c| c.name()).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// The probes' effect without their capabilities.
const PROBES_EFFECT: &str = "requests are not counted in the kernel";

/// Every feature `cfg` turns on that `p` lacks a capability for, in config order; `tracefs_reachable`: whether
/// tracefs's events can be read (pure: the brake's file access is [`brake_missing`]).
pub fn missing(p: &Privileges, cfg: &Config, tracefs_reachable: bool) -> Vec<Missing> {
    let mut out = Vec::new();
    let mut need = |on: bool, feature, lack: Vec<Cap>, effect| {
        if on && !lack.is_empty() {
            out.push(Missing { feature, lacks: names(&lack), effect });
        }
    };
    need(cfg.probes.enabled, "probes", p.probes_lack(tracefs_reachable), PROBES_EFFECT);
    let a = &cfg.actions;
    let signals =
        a.refuse_signal.is_some() || a.abort_signal.is_some() || a.serve_signal.is_some() || a.recycle_signal.is_some();
    need(signals, "signal actions", p.lacks(&[Cap::Kill]), "processes of other users are not signalled (EPERM)");
    need(
        a.admin_path.is_some(),
        "admin_path actions",
        p.lacks(&[Cap::SysPtrace]),
        "the ports of other users' processes are not found in /proc/<pid>/fd, so their changes are not POSTed",
    );
    out
}

/// The brake, when `[policy] brake_at` is set on cgroup v2 and this process may not write `memory.high` in
/// `group_dir`.
pub(crate) fn brake_missing(p: &Privileges, cfg: &Config, group_dir: &Path, v2: bool) -> Option<Missing> {
    let file = group_dir.join("memory.high");
    let writable = || {
        let Ok(c) = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(file.as_os_str())) else {
            return false;
        };
        // SAFETY: access reads a NUL-terminated path we own.
        unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
    };
    brake_lack(p, cfg, v2, &file, writable)
}

/// [`brake_missing`] with the file's access as a function (asked only when the brake is on and we are not root).
fn brake_lack(p: &Privileges, cfg: &Config, v2: bool, file: &Path, writable: impl FnOnce() -> bool) -> Option<Missing> {
    if cfg.policy.brake_at.is_none() || !v2 || p.euid == 0 || writable() {
        return None;
    }
    Some(Missing {
        feature: "brake",
        lacks: format!("write access to {}", file.display()),
        effect: "the kernel is not asked to throttle the group near its limit",
    })
}

/// Logs one warning for each feature `cfg` turns on that this process lacks a privilege for, but the probes (whose
/// own warning gives [`probes_reason`]).
pub(crate) fn warn_missing(cfg: &Config, group_dir: &Path, v2: bool) {
    let p = match current() {
        Ok(p) => p,
        Err(e) => return tracing::warn!("privileges not checked: {e}"),
    };
    let brake = brake_missing(&p, cfg, group_dir, v2);
    for m in missing(&p, cfg, crate::sources::probes::tracefs_reachable())
        .into_iter()
        .chain(brake)
        .filter(|m| m.feature != "probes")
    {
        tracing::warn!(feature = m.feature, "{m}");
    }
}

/// Why the probes did not load, naming the capabilities this process lacks when it lacks them, or, when attaching
/// failed with `attach_errno` under a `kernel.perf_event_paranoid` that refuses this process, that setting and its
/// remedy: `load_error` as it is otherwise.
pub(crate) fn probes_reason(load_error: &str, attach_errno: Option<i32>) -> String {
    let Ok(p) = current() else { return load_error.to_string() };
    let lack = p.probes_lack(crate::sources::probes::tracefs_reachable());
    if !lack.is_empty() {
        return format!("{} missing: {PROBES_EFFECT} ({load_error})", names(&lack));
    }
    match attach_errno.and_then(|errno| attach_refused(errno, read_perf_event_paranoid(), &p)) {
        Some(why) => format!("{why} ({load_error}: {})", std::io::Error::from_raw_os_error(attach_errno.unwrap_or(0))),
        None => load_error.to_string(),
    }
}

/// `/proc/sys/kernel/perf_event_paranoid`, when it can be read.
fn read_perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok()?.trim().parse().ok()
}

/// Why the kernel refused to attach a tracepoint with `errno`, when `kernel.perf_event_paranoid` (`paranoid`) is the
/// cause: above 2 (Debian's 3), `perf_event_open` needs CAP_SYS_ADMIN, which CAP_PERFMON does not replace; at 2 or
/// below CAP_PERFMON is enough. `None` for other errors, as root, or with CAP_SYS_ADMIN.
pub(crate) fn attach_refused(errno: i32, paranoid: Option<i32>, p: &Privileges) -> Option<String> {
    paranoid_refused(errno, paranoid, p, &format!("the tracepoints do not attach and {PROBES_EFFECT}"))
}

/// Why forked children are not traced from their fork (`attach_error`: the fork program's attach failure, with
/// `attach_errno`): the `kernel.perf_event_paranoid` that refused its tracepoint and the remedy when that is the
/// cause, `attach_error` as it is otherwise.
pub(crate) fn forks_reason(attach_error: &str, attach_errno: Option<i32>) -> String {
    let (Some(errno), Ok(p)) = (attach_errno, current()) else { return attach_error.to_string() };
    match forks_refused(errno, read_perf_event_paranoid(), &p) {
        Some(why) => format!("{why} ({attach_error}: {})", std::io::Error::from_raw_os_error(errno)),
        None => attach_error.to_string(),
    }
}

/// [`attach_refused`] for the fork-following tracepoint, the one part of the probes that still needs
/// `perf_event_open` when `close` is hooked on the raw `sys_enter` tracepoint.
pub(crate) fn forks_refused(errno: i32, paranoid: Option<i32>, p: &Privileges) -> Option<String> {
    paranoid_refused(errno, paranoid, p, FORKS_EFFECT)
}

/// What refusing the fork-following tracepoint costs.
const FORKS_EFFECT: &str = "task/task_newtask does not attach and the children a traced process forks count only \
     from the sample after they appear in the group, not from their fork";

fn paranoid_refused(errno: i32, paranoid: Option<i32>, p: &Privileges, effect: &str) -> Option<String> {
    let refused = errno == libc::EACCES || errno == libc::EPERM;
    let paranoid = paranoid?;
    if !refused || paranoid <= 2 || p.euid == 0 || p.has(Cap::SysAdmin) {
        return None;
    }
    Some(format!(
        "kernel.perf_event_paranoid is {paranoid}: above 2 perf_event_open needs CAP_SYS_ADMIN, so {effect}; allow \
         CAP_PERFMON with `kernel.perf_event_paranoid = 2` in /etc/sysctl.d/ (docs/deploy.md)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/self/status` of `setpriv --reuid nobody` (no capabilities), trimmed.
    const NOBODY: &str = "Name:\tcat\nUmask:\t0022\nState:\tR (running)\nUid:\t65534\t65534\t65534\t65534\n\
        Gid:\t65534\t65534\t65534\t65534\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
        CapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n";
    /// A `monitor` user with the ambient set systemd gives it (CAP_KILL, CAP_SYS_PTRACE, CAP_PERFMON, CAP_BPF).
    const MONITOR: &str = "Uid:\t998\t998\t998\t998\nCapEff:\t000000c000080020\n";
    /// Root.
    const ROOT: &str = "Uid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n";

    fn parsed(text: &str) -> Privileges {
        parse_status(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn said(p: &Privileges, cfg: &Config) -> Vec<String> {
        missing(p, cfg, true).iter().map(ToString::to_string).collect()
    }

    /// The defaults (probes on) with every signal action and an admin path.
    fn everything() -> Config {
        let mut cfg = Config::default();
        cfg.actions.abort_signal = crate::config::Signal::from_name("SIGUSR2");
        cfg.actions.admin_path = Some("/admin/memory".into());
        cfg
    }

    #[test]
    fn parses_the_effective_uid_and_capabilities() {
        assert_eq!(parsed(NOBODY), Privileges { euid: 65534, effective: 0 });
        let m = parsed(MONITOR);
        assert_eq!(m.euid, 998);
        for c in [Cap::Kill, Cap::SysPtrace, Cap::Perfmon, Cap::Bpf] {
            assert!(m.has(c), "{}", c.name());
        }
        assert!(!m.has(Cap::SysAdmin));
        assert!(parse_status("Uid:\t1\t2\t3\t4\n").is_err(), "no CapEff");
        assert!(parse_status("Uid:\t1\nCapEff:\t0\n").is_err(), "no effective uid");
        assert!(parse_status("Uid:\t1\t2\t3\t4\nCapEff:\txyz\n").is_err(), "bad hex");
    }

    #[test]
    fn without_capabilities_each_feature_says_what_it_lacks_and_what_follows() {
        assert_eq!(
            said(&parsed(NOBODY), &everything()),
            [
                "probes off: CAP_BPF and CAP_PERFMON missing; requests are not counted in the kernel",
                "signal actions off: CAP_KILL missing; processes of other users are not signalled (EPERM)",
                "admin_path actions off: CAP_SYS_PTRACE missing; the ports of other users' processes are not found in \
                 /proc/<pid>/fd, so their changes are not POSTed",
            ]
        );
    }

    #[test]
    fn with_the_units_capabilities_or_as_root_nothing_is_missing() {
        assert_eq!(said(&parsed(MONITOR), &everything()), Vec::<String>::new());
        assert_eq!(said(&parsed(ROOT), &everything()), Vec::<String>::new());
        // CAP_SYS_ADMIN alone covers the probes.
        let admin = Privileges { euid: 5, effective: 1 << Cap::SysAdmin as u32 };
        assert!(said(&admin, &Config::default()).is_empty());
    }

    #[test]
    fn a_tracefs_out_of_reach_needs_dac_read_search_then_sys_admin() {
        let probes = |p: &Privileges| -> Vec<String> {
            missing(p, &Config::default(), false).iter().map(ToString::to_string).collect()
        };
        assert_eq!(
            probes(&parsed(NOBODY)),
            ["probes off: CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH missing; requests are not counted in the \
              kernel"]
        );
        let bpf = (1 << Cap::Bpf as u32) | (1 << Cap::Perfmon as u32);
        assert_eq!(
            probes(&Privileges { euid: 9, effective: bpf }),
            ["probes off: CAP_DAC_READ_SEARCH missing; requests are not counted in the kernel"]
        );
        let read = bpf | (1 << Cap::DacReadSearch as u32);
        assert_eq!(
            probes(&Privileges { euid: 9, effective: read }),
            ["probes off: CAP_SYS_ADMIN missing; requests are not counted in the kernel"],
            "readable yet not there: not mounted"
        );
        assert!(probes(&parsed(ROOT)).is_empty());
    }

    #[test]
    fn the_brake_needs_memory_high_writable_on_v2() {
        let mut cfg = Config::default();
        let file = Path::new("/sys/fs/cgroup/app.service/memory.high");
        let nobody = parsed(NOBODY);
        let lack = |cfg: &Config, v2, writable| brake_lack(&nobody, cfg, v2, file, || writable).map(|m| m.to_string());
        assert_eq!(lack(&cfg, true, false), None, "no brake_at: no brake");
        cfg.policy.brake_at = Some(0.96);
        assert_eq!(
            lack(&cfg, true, false).as_deref(),
            Some(
                "brake off: write access to /sys/fs/cgroup/app.service/memory.high missing; the kernel is not asked \
                 to throttle the group near its limit"
            )
        );
        assert_eq!(lack(&cfg, true, true), None);
        assert_eq!(lack(&cfg, false, false), None, "v1 has no brake, whatever the access");
        assert_eq!(brake_lack(&parsed(ROOT), &cfg, true, file, || false), None);
    }

    #[test]
    fn a_refused_attach_names_perf_event_paranoid_when_it_is_the_cause() {
        let monitor = parsed(MONITOR);
        let admin = Privileges { euid: 998, effective: monitor.effective | 1 << Cap::SysAdmin as u32 };
        let root = parsed(ROOT);
        // (errno, paranoid, privileges, named?)
        let table = [
            (libc::EACCES, Some(3), &monitor, true),
            (libc::EPERM, Some(3), &monitor, true),
            (libc::EACCES, Some(4), &monitor, true),
            (libc::EACCES, Some(2), &monitor, false),
            (libc::EACCES, Some(-1), &monitor, false),
            (libc::EACCES, None, &monitor, false),
            (libc::ENOENT, Some(3), &monitor, false),
            (libc::EINVAL, Some(3), &monitor, false),
            (libc::EACCES, Some(3), &admin, false),
            (libc::EACCES, Some(3), &root, false),
        ];
        for (errno, paranoid, p, named) in table {
            let said = attach_refused(errno, paranoid, p);
            assert_eq!(said.is_some(), named, "errno {errno}, paranoid {paranoid:?}, {p:?}: {said:?}");
        }
        assert_eq!(
            attach_refused(libc::EACCES, Some(3), &monitor).as_deref(),
            Some(
                "kernel.perf_event_paranoid is 3: above 2 perf_event_open needs CAP_SYS_ADMIN, so the tracepoints do \
                 not attach and requests are not counted in the kernel; allow CAP_PERFMON with \
                 `kernel.perf_event_paranoid = 2` in /etc/sysctl.d/ (docs/deploy.md)"
            )
        );
        // The fork-following tracepoint: the same cases, its own effect.
        for (errno, paranoid, p, named) in table {
            assert_eq!(forks_refused(errno, paranoid, p).is_some(), named, "forks: errno {errno}, {paranoid:?}");
        }
        assert_eq!(
            forks_refused(libc::EACCES, Some(3), &monitor).as_deref(),
            Some(
                "kernel.perf_event_paranoid is 3: above 2 perf_event_open needs CAP_SYS_ADMIN, so task/task_newtask \
                 does not attach and the children a traced process forks count only from the sample after they \
                 appear in the group, not from their fork; allow CAP_PERFMON with `kernel.perf_event_paranoid = 2` \
                 in /etc/sysctl.d/ (docs/deploy.md)"
            )
        );
    }

    #[test]
    fn features_left_off_need_nothing() {
        let mut cfg = Config::default();
        cfg.probes.enabled = false;
        assert_eq!(said(&parsed(NOBODY), &cfg), Vec::<String>::new());
        let one = Privileges { euid: 7, effective: 1 << Cap::Bpf as u32 };
        assert_eq!(
            said(&one, &Config::default()),
            ["probes off: CAP_PERFMON missing; requests are not counted in the kernel"]
        );
    }
}
