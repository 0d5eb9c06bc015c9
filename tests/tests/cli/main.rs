//! The `monitor` command line and the files shipped beside it: one-line errors for bad input, `report --png`,
//! `check-config` on the fixtures and the docs' examples, docs/configuration.md against the config's keys and
//! defaults, the deploy units, the man pages and completions, the docs' metric names against what is exported, and
//! the monitor crate's module graph (no cycle).

mod config_doc;
mod deploy_units;
mod docs_check;
mod errors;
mod layering;
mod logs;
mod man_pages;
mod readme_configs;
mod report;
