//! SIGHUP before its handler. The agent reloads its config on SIGHUP (`systemctl reload`), but the handler
//! ([`crate::agent`]'s reload task) exists only once the runtime runs; a hangup in the milliseconds before would end
//! the process, SIGHUP's default action. From the start of `main` SIGHUP is ignored ([`ignore_until_handled`]);
//! installing the reload handler replaces that, and a hangup in between is dropped (the config it would reload was
//! just read). Launched servers get the default action back before they exec ([`default_in_child`]), as an ignored
//! signal would otherwise pass to them. `grep SigIgn /proc/<pid>/status` shows it: bit 0 is SIGHUP.

/// Ignores SIGHUP until a handler is installed. Call first thing in `main`, before any thread starts.
pub fn ignore_until_handled() {
    // SAFETY: setting a disposition to SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
}

/// Gives SIGHUP its default action back: in a forked child before exec (`signal` is async-signal-safe), and in
/// the commands that do not reload.
pub fn default_in_child() {
    // SAFETY: setting a disposition to SIG_DFL has no preconditions.
    unsafe { libc::signal(libc::SIGHUP, libc::SIG_DFL) };
}
