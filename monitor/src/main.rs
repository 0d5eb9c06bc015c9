//! The `monitor` command line.

fn main() {}
