//! The `monitor` command line and the files shipped beside it: one-line errors for bad input, `check-config` on
//! the fixtures and the README's examples, the deploy units, and the docs' metric names against what is exported.

mod deploy_units;
mod docs_check;
mod errors;
mod readme_configs;
