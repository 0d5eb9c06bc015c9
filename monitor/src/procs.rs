//! procs
