//! `monitor run` (launcher, front door and agent in one process) over the fixture backend in a memory cgroup (v1 or
//! v2): readiness and health checks, restarts, start-up, memory-driven shedding, kernel counts, its own group, as a
//! container's PID 1, its web API, the configured names it gives its processes, its config reloads, the proof on its
//! action POSTs, how it reads request paths as the processes may (over Jetty), and how it stops and drains.

mod container;
mod counts;
mod drain;
mod drain_load;
mod growth;
mod health;
mod memory;
mod names;
mod own_group;
mod paths;
mod proof;
mod readiness;
mod reload;
mod restart;
mod startup;
mod stop;
mod users;
mod web;
