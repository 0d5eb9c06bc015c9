//! `monitor agent` against real memory cgroups (v1 or v2, whichever the host offers), real processes and real servers:
//! what it measures and decides (`v1`), the signals and POSTs it sends (`actions`), its alerts (`alerts`, `oom_kills`,
//! and the privileges of an alert command: `alert_caps`), its sampling past the fd limit (`fds`), what it survives
//! (`failures`), its place in its own group (`own_group`), what it says without root's capabilities (`privileges`), its
//! web pages and history (`web`), the kernel's request counts it reports (`probes`, `fork`), its config reloads
//! (`reload`), and the memory of a process whose main thread exited, read from a live thread (`threads`). Its bounds
//! under load are measured in a binary of their own (tests/tests/bounds), where no other test loads the machine.

mod actions;
mod alert_caps;
mod alerts;
mod alerts_tls;
mod failures;
mod fds;
mod fork;
mod hangup;
mod names;
mod oom_kills;
mod own_group;
mod privileges;
mod probes;
mod reload;
mod systemd;
mod threads;
mod v1;
mod web;
