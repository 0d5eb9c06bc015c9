//! The front door of `monitor run`: routing rules, retries, and what it does with bad, malformed, oversized or
//! slow input from clients and broken answers from backends.

mod bad_input;
mod bodies;
mod clients;
mod edge;
mod retry;
mod routing;
