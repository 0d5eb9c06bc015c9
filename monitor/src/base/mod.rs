//! What every floor may use: small leaves that know nothing of the group (kernel files, pidfds, tokens, units,
//! the log, systemd's notify, the actions' proofs, reaction times, ordered queues, outside strings made safe to print).

pub(crate) mod accept;
pub(crate) mod accounts;
pub mod hangup;
pub mod kernfile;
pub mod logs;
pub(crate) mod nocaps;
pub(crate) mod notify;
pub(crate) mod on_wake;
pub(crate) mod ordered;
pub(crate) mod pacing;
pub(crate) mod pidfd;
pub mod proof;
pub(crate) mod reaction;
pub(crate) mod reaper;
pub(crate) mod reply;
pub mod text;
pub mod token;
pub(crate) mod units;
