//! `cargo xtask bench image`: the OCI image of `cargo xtask dist --image` under podman on this host. Its size (the
//! archive, and unpacked as podman stores it), then, 5 rounds each, the median of:
//!
//! - **start**: `monitor run` as the container's PID 1, from `podman run` to the API's `/healthz` answering 200,
//!   which it does once the master and the two workers (`fixture-backend`, mounted in) are ready;
//! - **the baseline**, in the same run: the same image with one `fixture-backend` as its entrypoint, from
//!   `podman run` to its first answer: the runtime's own start and one server's, which no supervisor can beat;
//! - **stop**: `podman stop` of the first, which drains and ends with exit code 0 (checked).
//!
//! podman runs with storage of its own under target/bench-image (removed at the end; the host's containers storage
//! is never touched), the cgroupfs manager (no systemd needed), host networking (loopback ports) and
//! `--memory 256m`. The runtime is runc, which runs on a host whose memory controller is on cgroup v1 beside a v2
//! hierarchy (crun refuses that hybrid); the open-file and process limits are set below podman's defaults (a
//! million files), since a root without `CAP_SYS_RESOURCE` (a sandboxed host) cannot raise them.

use crate::util::run as sh;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const ROUNDS: usize = 5;

/// The container's limits: open files and processes (see above).
const LIMIT_FILES: &str = "nofile=4096:4096";
const LIMIT_PROCS: &str = "nproc=8192:8192";

/// podman with the bench's own storage.
struct Podman {
    dir: PathBuf,
}

impl Podman {
    fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.arg("--root").arg(self.dir.join("root")).arg("--runroot").arg(self.dir.join("run"));
        c.args(["--cgroup-manager", "cgroupfs", "--events-backend", "file", "--runtime", "runc"]);
        c.arg("--tmpdir").arg(self.dir.join("tmp"));
        c
    }

    /// Runs podman with `args`; its standard output, trimmed.
    fn run(&self, args: &[&str]) -> Result<String> {
        crate::util::stdout_of(self.cmd().args(args), &format!("podman {}", args.join(" ")))
    }

    /// `podman run --detach` of `image` as `name`, with host networking, the memory limit and the limits above:
    /// `options` go before the image, `args` after it.
    fn start(&self, name: &str, options: &[&str], image: &str, args: &[&str]) -> Result<String> {
        let mut all = vec!["run", "--detach", "--name", name, "--network", "host", "--memory", "256m"];
        all.extend(["--ulimit", LIMIT_FILES, "--ulimit", LIMIT_PROCS]);
        all.extend_from_slice(options);
        all.push(image);
        all.extend_from_slice(args);
        self.run(&all)
    }

    /// Removes every container, then the storage.
    fn clear(&self) {
        let _ = self.cmd().args(["rm", "--all", "--force", "--time", "0"]).output();
        let _ = self.cmd().args(["system", "reset", "--force"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `GET path` on 127.0.0.1:`port` every 5 ms until it answers 200; the time from `t0`.
fn until_ok(port: u16, path: &str, t0: Instant, patience: Duration) -> Result<Duration> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    while t0.elapsed() < patience {
        if monitor_tests::http::get(addr, path, Duration::from_secs(1)).is_ok_and(|r| r.status == 200) {
            return Ok(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    bail!("127.0.0.1:{port}{path} did not answer 200 within {patience:?}")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// The config of the container: a master and two workers on loopback ports, the API and the front door too.
fn config(web: u16, proxy: u16, ports: [u16; 3]) -> String {
    let mut s = format!(
        "[group]\ncgroup = \"auto\"\n[web]\nlisten = \"127.0.0.1:{web}\"\n[proxy]\nlisten = \"127.0.0.1:{proxy}\"\n\
         drain_timeout_s = 20\nstop_grace_s = 5\n[probes]\nenabled = false\n"
    );
    for (i, port) in ports.iter().enumerate() {
        let (name, role) = if i == 0 { ("m0".to_string(), "master") } else { (format!("tx{i}"), "worker") };
        s.push_str(&format!(
            "[[process]]\nname = \"{name}\"\nrole = \"{role}\"\n\
             command = [\"/usr/local/bin/fixture-backend\", \"--name\", \"{name}\", \"--port\", \"{port}\"]\nport = {port}\n"
        ));
    }
    s
}

fn path(p: &Path) -> Result<&str> {
    p.to_str().with_context(|| format!("{} is not UTF-8", p.display()))
}

pub fn run() -> Result<()> {
    let root = crate::util::root();
    let target = crate::util::target_dir();
    crate::util::ensure_command("podman", "podman", "cargo xtask bench image")?;
    crate::util::ensure_command("runc", "runc", "cargo xtask bench image")?;
    crate::build::run()?;
    sh(Command::new("cargo").current_dir(&root).args([
        "build",
        "--release",
        "-p",
        "monitor-tests",
        "--bin",
        "fixture-backend",
    ]))?;
    let fixture = target.join("release/fixture-backend");
    let cache = crate::vmtest::kernel::cache_dir(&target);
    let binary = target.join("release/monitor");
    let dist = target.join("dist");
    let spec = crate::dist::image::Spec { binary: &binary, include: &[], cache: &cache, out_dir: &dist };
    let built = crate::dist::image::build(&spec)?;
    let archive_bytes = std::fs::metadata(&built.archive).map(|m| m.len()).unwrap_or(0);

    let podman = Podman { dir: target.join("bench-image") };
    podman.clear();
    let result = measure(&podman, &built, &fixture, &target);
    podman.clear();
    let (stored, start, baseline, stop) = result?;
    println!("image {} (cargo xtask dist --image, Debian bookworm minbase):", built.reference);
    println!("  archive: {:.1} MiB", archive_bytes as f64 / 1048576.0);
    println!("  unpacked: {:.1} MiB", stored as f64 / 1048576.0);
    println!("podman run to /healthz 200, a master and two workers ready, median of {ROUNDS}: {}", ms(start));
    println!("baseline: podman run to one fixture-backend's first answer, median of {ROUNDS}: {}", ms(baseline));
    println!("  ratio {:.2}x the baseline", start.as_secs_f64() / baseline.as_secs_f64());
    println!("podman stop (drain, exit code 0), median of {ROUNDS}: {}", ms(stop));
    Ok(())
}

/// (the image's size in podman's storage, start, baseline, stop).
fn measure(
    podman: &Podman,
    built: &crate::dist::image::Built,
    fixture: &Path,
    target: &Path,
) -> Result<(u64, Duration, Duration, Duration)> {
    podman.run(&["load", "--quiet", "--input", path(&built.archive)?])?;
    let stored: u64 =
        podman.run(&["image", "inspect", "--format", "{{.Size}}", &built.reference])?.parse().unwrap_or(0);
    let conf = target.join("bench-image-run.toml");
    let mount = format!("{}:/usr/local/bin/fixture-backend:ro", path(fixture)?);
    let patience = Duration::from_secs(60);
    let (mut starts, mut baselines, mut stops) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let free = monitor_tests::agent::free_port;
        let (web, proxy, ports) = (free(), free(), [free(), free(), free()]);
        std::fs::write(&conf, config(web, proxy, ports)).with_context(|| format!("writing {}", conf.display()))?;
        let conf_mount = format!("{}:/etc/monitor/run.toml:ro", path(&conf)?);

        // The baseline: one server as the entrypoint.
        let name = format!("bench-base-{round}");
        let t0 = Instant::now();
        let port = ports[0].to_string();
        let extra = ["--volume", &mount, "--entrypoint", "/usr/local/bin/fixture-backend"];
        podman.start(&name, &extra, &built.reference, &["--name", "m0", "--port", &port])?;
        baselines.push(until_ok(ports[0], "/health", t0, patience)?);
        podman.run(&["rm", "--force", "--time", "0", &name])?;

        // monitor run as PID 1.
        let name = format!("bench-monitor-{round}");
        let t0 = Instant::now();
        podman.start(&name, &["--volume", &mount, "--volume", &conf_mount], &built.reference, &[])?;
        let started = until_ok(web, "/healthz", t0, patience);
        if let Err(e) = started {
            let logs = podman.run(&["logs", &name]).unwrap_or_default();
            bail!("{e:#}; the container said:\n{logs}");
        }
        starts.push(started?);
        let t0 = Instant::now();
        podman.run(&["stop", "--time", "30", &name])?;
        stops.push(t0.elapsed());
        let code = podman.run(&["inspect", "--format", "{{.State.ExitCode}}", &name])?;
        if code != "0" {
            let logs = podman.run(&["logs", &name]).unwrap_or_default();
            bail!("monitor run exited {code} after podman stop:\n{logs}");
        }
        podman.run(&["rm", &name])?;
    }
    let _ = std::fs::remove_file(&conf);
    Ok((stored, median(starts), median(baselines), median(stops)))
}
