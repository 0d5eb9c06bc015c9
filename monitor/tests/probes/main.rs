//! The eBPF probes against real servers (python's http.server, Node, nginx, forking servers, a Unix socket) and
//! real clients (curl, wrk, hand-driven keep-alive connections): exact per-process counts of accepts, requests and
//! responses by class. They need root and the probes' object (`cargo xtask setup`); without root they print why
//! they skip, and in CI (`CI=true`) they fail instead.

mod counts;
mod fork;
mod nginx;
mod node;
mod python;
mod raw_close;
mod unix;
