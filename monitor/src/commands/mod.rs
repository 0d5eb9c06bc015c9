//! The commands beside the agent: `monitor status` (the table), `monitor report`, and the man pages.

pub mod docs;
pub mod report;
pub mod table;
