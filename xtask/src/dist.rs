//! `cargo xtask dist`: the Debian package, `target/debian/monitor_<version>-1_amd64.deb`. Builds the release binary
//! with its eBPF object (failing rather than packaging an agent whose probes are off), has that binary write its
//! man pages and shell completions into `target/dist/doc` (`monitor generate-docs`), then packs everything named in
//! monitor/Cargo.toml's `[package.metadata.deb]` with cargo-deb, installed once when missing. With `--image`, the OCI
//! image instead ([`image`]).

pub(crate) mod image;

use crate::util::{root, run as sh};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The cargo-deb release this task installs when none is on the PATH.
const CARGO_DEB: &str = "cargo-deb";

#[derive(clap::Args)]
pub struct Args {
    /// Skip `cargo build` (use the release binary already in the target directory).
    #[arg(long)]
    no_build: bool,
    /// Build the OCI image instead of the package: target/dist/monitor-<version>.oci.tar, `monitor run` as the
    /// entrypoint on a Debian bookworm minbase (buildah and mmdebstrap, installed when missing; root).
    #[arg(long)]
    image: bool,
    /// With --image: Debian packages the servers need in the image, comma-separated (for example nodejs).
    #[arg(long, requires = "image", value_delimiter = ',')]
    include: Vec<String>,
}

/// Whether `cargo deb` runs at all.
fn have_cargo_deb() -> bool {
    Command::new("cargo").args(["deb", "--version"]).output().is_ok_and(|o| o.status.success())
}

/// Installs cargo-deb when missing (`cargo install --locked`, about 90 s once per machine).
pub fn ensure_cargo_deb() -> Result<()> {
    if have_cargo_deb() {
        return Ok(());
    }
    sh(Command::new("cargo").args(["install", CARGO_DEB, "--locked"]))
}

pub fn run(args: Args) -> Result<()> {
    let root = root();
    if !args.image {
        ensure_cargo_deb()?;
    }
    if !args.no_build {
        crate::setup::run().context("the package carries the eBPF object")?;
        crate::build::run()?;
    }
    if args.image {
        let target = crate::util::target_dir();
        let binary = target.join("release/monitor");
        let cache = crate::vmtest::kernel::cache_dir(&target);
        let spec =
            image::Spec { binary: &binary, include: &args.include, cache: &cache, out_dir: &target.join("dist") };
        let t = std::time::Instant::now();
        let built = image::build(&spec)?;
        let size = std::fs::metadata(&built.archive).map(|m| m.len()).unwrap_or(0);
        eprintln!(
            "dist: image {} ({:.1} MiB archive) in {:.1} s",
            built.reference,
            size as f64 / 1048576.0,
            t.elapsed().as_secs_f64()
        );
        println!("{}", built.archive.display());
        return Ok(());
    }
    let deb = package(&root, &crate::util::target_dir())?;
    println!("{}", deb.display());
    Ok(())
}

/// Generates the docs from the release binary and packs the .deb; returns its path.
pub fn package(root: &Path, target: &Path) -> Result<PathBuf> {
    let monitor = target.join("release/monitor");
    if !monitor.exists() {
        bail!("{} is missing: run `cargo xtask build` (or `cargo xtask dist` without --no-build)", monitor.display());
    }
    // cargo-deb reads the docs from here (paths in [package.metadata.deb] are relative to monitor/).
    let doc = crate::util::target_dir().join("dist/doc");
    generate_docs(&monitor, &doc)?;
    let out = target.join("debian");
    sh(Command::new("cargo")
        .current_dir(root)
        .args(["deb", "-p", "monitor", "--no-build", "--strip", "--output"])
        .arg(&out))?;
    newest_deb(&out)
}

/// `monitor generate-docs DIR` ([`crate::man::generate`]): DIR/man/*.1 and
/// DIR/completions/{monitor.bash,_monitor,monitor.fish}, each checked for, since cargo-deb packs them by name.
fn generate_docs(monitor: &Path, doc: &Path) -> Result<()> {
    if doc.exists() {
        std::fs::remove_dir_all(doc).with_context(|| format!("removing {}", doc.display()))?;
    }
    crate::man::generate(monitor, doc).context("the package carries the man pages and completions")?;
    for want in ["man/monitor.1", "completions/monitor.bash", "completions/_monitor", "completions/monitor.fish"] {
        if !doc.join(want).exists() {
            bail!("`monitor generate-docs` wrote no {want} under {}", doc.display());
        }
    }
    Ok(())
}

/// The most recently written .deb in `dir`.
fn newest_deb(dir: &Path) -> Result<PathBuf> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .with_context(|| format!("cargo deb wrote no .deb in {}", dir.display()))
}
