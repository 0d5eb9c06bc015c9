//! What this binary is: its version, the commit it was built from, and whether the eBPF object is built in. Shown
//! by `monitor --version` and in `monitor_build_info`.

/// The crate's version.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit the binary was built from (12 hex digits), or `unknown`.
pub(crate) const REVISION: &str = env!("MONITOR_GIT_REVISION");

/// Whether the eBPF object is built in (without it the probes are off, whatever the config says).
pub(crate) fn probes_built() -> bool {
    crate::sources::probes::object::SKIPPED.is_empty()
}

/// `0.1.0 (revision 0123456789ab, eBPF object built in)`, or why the object is missing.
pub fn long_version() -> String {
    let probes = match probes_built() {
        true => "eBPF object built in".to_string(),
        false => format!("eBPF object not built in: {}", crate::sources::probes::object::SKIPPED),
    };
    format!("{VERSION} (revision {REVISION}, {probes})")
}
