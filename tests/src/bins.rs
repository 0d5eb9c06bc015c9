//! Where the binaries the tests run are: `monitor` (`$MONITOR_BIN`, else the workspace's debug build) and this
//! crate's fixtures (`alloc-hog`, `fixture-backend`, `grower`, `thread-holder`), which cargo builds beside the test
//! executables' folder (`target/<profile>/` for `target/<profile>/deps/<test>`) and the test VM puts beside
//! `vm-suite`.

use std::path::{Path, PathBuf};

/// The workspace root (the folder above tests/).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).unwrap_or_else(|| here.to_path_buf())
}

/// The agent binary: `$MONITOR_BIN` (relative: to the workspace root), else the `monitor` cargo built into the
/// same target folder as the running test (`target/<profile>/monitor` for `target/<profile>/deps/<test>`, so a
/// `CARGO_TARGET_DIR` elsewhere is followed), else `<workspace>/target/debug/monitor`. Panics if it does not exist.
pub fn monitor_bin() -> PathBuf {
    let beside_tests = exe_dir().parent().map(|d| d.join("monitor")).filter(|p| p.is_file());
    let bin = match std::env::var_os("MONITOR_BIN") {
        // cargo runs tests in the package's folder: a relative path is taken from the workspace root.
        Some(p) if Path::new(&p).is_relative() => workspace_root().join(p),
        Some(p) => PathBuf::from(p),
        None => beside_tests.unwrap_or_else(|| workspace_root().join("target/debug/monitor")),
    };
    if !bin.is_file() {
        panic!(
            "monitor binary not found at {}: run `cargo build -p monitor` (or `cargo xtask test`), \
             or set MONITOR_BIN",
            bin.display()
        );
    }
    bin
}

/// The folder of the running executable.
pub fn exe_dir() -> PathBuf {
    match std::env::current_exe() {
        Ok(p) => p.parent().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/bin")),
        Err(_) => PathBuf::from("/bin"),
    }
}

/// The fixture `name` of this crate: beside the running executable (the VM, `vm-suite`), else one folder up (cargo's
/// `deps/` for test executables; returned even when it is missing there, so that starting it names the path).
pub fn fixture(name: &str) -> PathBuf {
    let here = exe_dir();
    let beside = here.join(name);
    if beside.is_file() {
        return beside;
    }
    here.parent().map_or(beside, |up| up.join(name))
}

/// `alloc-hog`: holds a known amount of touched anonymous memory.
pub fn alloc_hog() -> PathBuf {
    fixture("alloc-hog")
}

/// `fixture-backend`: the HTTP backend `monitor run` starts in the tests.
pub fn fixture_backend() -> PathBuf {
    fixture("fixture-backend")
}

/// `grower`: grows at a set speed until signalled.
pub fn grower() -> PathBuf {
    fixture("grower")
}

/// `thread-holder`: its main thread exits, another thread holds the memory.
pub fn thread_holder() -> PathBuf {
    fixture("thread-holder")
}

/// The virtual environment `cargo xtask setup --packages` installs kubernetes-validate into (from PyPI; Debian has
/// no package of it): `kubernetes-validate` under `$MONITOR_TOOLS`, else under `$HOME/.cache/monitor-tools`.
pub fn kubernetes_validate_venv() -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("MONITOR_TOOLS")
        .or_else(|| var("HOME").map(|h| h.join(".cache/monitor-tools")))
        .unwrap_or_else(|| std::env::temp_dir().join("monitor-tools"))
        .join("kubernetes-validate")
}
