//! Starting one child: argv without a shell, joined to the group's cgroup before exec (so every page it touches is
//! charged to the group), killed with the launcher (PR_SET_PDEATHSIG and kill-on-drop), in its own process group
//! (a terminal's Ctrl-C reaches the launcher, which drains, not the children), with the soft fd limit monitor started
//! with, as its `user`/`group` (supplementary groups, then gid, then uid, after joining the cgroup and before exec),
//! with the launcher's environment for every process (the actions' secret) after its own. Also the health probe.

use super::Options;
use crate::base::accounts::{self, AccountError, Credentials};
use crate::base::reaper::{self, Kid};
use crate::config::ProcessConfig;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// The credentials `p` is started with, when they differ from the launcher's own: its `user`/`group` looked up
/// now (the user database may change between restarts), and an error when monitor may not take them (not root).
pub(crate) fn credentials(p: &ProcessConfig) -> Result<Option<Credentials>, AccountError> {
    match accounts::resolve(p.user.as_ref(), p.group.as_ref())? {
        Some(c) if accounts::must_switch(&c)? => Ok(Some(c)),
        _ => Ok(None),
    }
}

/// Starts `p` inside the cgroup directory `opts.cgroup` (None: stays in the launcher's own cgroup), with
/// `opts.env` after its own environment.
pub fn spawn(p: &ProcessConfig, opts: &Options) -> io::Result<Kid> {
    let cgroup = opts.cgroup.as_deref();
    let creds = credentials(p).map_err(io::Error::other)?;
    let mut cmd = Command::new(&p.command[0]);
    // The service manager's sockets are the agent's: a child must not notify (or feed the watchdog) for it.
    for var in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        cmd.env_remove(var);
    }
    if let Some(u) = creds.as_ref().and_then(|c| c.user.as_ref()) {
        cmd.env("HOME", &u.home).env("USER", &u.name).env("LOGNAME", &u.name);
    }
    cmd.args(&p.command[1..]).envs(&p.env).envs(opts.env.iter().map(|(k, v)| (k, v)));
    cmd.kill_on_drop(true).process_group(0).stdin(std::process::Stdio::null());
    let procs = match cgroup {
        Some(dir) => Some(
            CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
        ),
        None => None,
    };
    // SAFETY: getpid is async-signal-safe and has no preconditions.
    let parent = unsafe { libc::getpid() };
    // The soft fd limit monitor started with (it raised its own): a server using select() breaks past 1024.
    let nofile = crate::sources::procs::child_fd_limit();
    // SAFETY: the closure runs in the forked child before exec and makes only async-signal-safe system calls
    // (prctl, getppid, getrlimit, setrlimit, open, write, close, setgroups, setgid, setuid, signal) on memory allocated
    // before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(soft) = nofile {
                let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && soft < lim.rlim_cur {
                    lim.rlim_cur = soft;
                    libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
                }
            }
            if let Some(path) = &procs {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
            }
            // After joining the cgroup (its cgroup.procs is root's to write), before the death signal (a change of
            // credentials clears it).
            if let Some(c) = &creds {
                if libc::setgroups(c.groups.len(), c.groups.as_ptr()) != 0 || libc::setgid(c.gid) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(uid) = c.uid {
                    if libc::setuid(uid) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
            }
            // Ambient capabilities (the units give monitor CAP_BPF and others for the probes) would pass to the
            // server across exec: it gets none.
            libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0);
            // monitor ignores SIGHUP until its reload handler exists: the server gets the default action.
            crate::base::hangup::default_in_child();
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                // The launcher died between fork and prctl.
                return Err(io::Error::other("launcher exited"));
            }
            Ok(())
        });
    }
    reaper::spawn(&mut cmd)
}

/// One `GET <path>` to `127.0.0.1:<port>`: true on a 2xx answer within `timeout`.
pub async fn probe(port: u16, path: &str, timeout: Duration) -> bool {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head).await?;
        Ok::<bool, io::Error>(head.starts_with(b"HTTP/1.") && head[9] == b'2')
    };
    matches!(tokio::time::timeout(timeout, attempt).await, Ok(Ok(true)))
}

/// Sends `sig` to a child we started (pid 0 is never signalled).
pub fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        if pid > 0 {
            // SAFETY: kill has no memory-safety preconditions; the pid is our own un-reaped child.
            unsafe { libc::kill(pid, sig) };
        }
    }
}
