//! `monitor run`'s front door: the processes it launches and restarts, and the reverse proxy before them.

pub(crate) mod launcher;
pub mod proxy;
