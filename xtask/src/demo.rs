//! `cargo xtask demo`: the whole system on this host. For now: a limited cgroup v1 memory group holding three
//! `alloc-hog` processes, `monitor agent` watching it, and the group grown past refuse_at and abort_at and shrunk
//! back, with `monitor status` printed at each step. Everything is removed at the end, and on Ctrl-C by a
//! watchdog that outlives this process.

use crate::util::{is_root, root, run as sh};
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const V1_MEMORY: &str = "/sys/fs/cgroup/memory";

#[derive(clap::Args)]
pub struct Args {
    /// Memory limit of the demo group, in MiB.
    #[arg(long, default_value_t = 256)]
    limit_mib: u64,
    /// Pause after each step before printing the status, in milliseconds.
    #[arg(long, default_value_t = 1500)]
    step_ms: u64,
    /// Address of the agent's API (default: a free loopback port).
    #[arg(long)]
    listen: Option<SocketAddr>,
}

/// The demo's steps: a name and each process's share of the limit (the total stays below 97%: with no swap,
/// anonymous memory cannot be reclaimed and the kernel would OOM-kill).
const STEPS: &[(&str, [f64; 3])] = &[
    ("start: 75% of the limit, normal", [0.20, 0.25, 0.30]),
    ("grow to 88%: past refuse_at (0.85), every process refuses", [0.22, 0.28, 0.38]),
    ("grow to 94%: past abort_at (0.92), the largest aborts", [0.22, 0.30, 0.42]),
    ("shrink to 86%: below abort_at - hysteresis, refusing again", [0.21, 0.27, 0.38]),
    ("shrink to 60%: below refuse_at - hysteresis, normal", [0.15, 0.20, 0.25]),
];

pub fn run(args: Args) -> Result<()> {
    if !is_root() {
        bail!("demo needs root (it creates a memory cgroup): run it as root");
    }
    if !Path::new(V1_MEMORY).join("memory.limit_in_bytes").exists() {
        bail!("demo needs the cgroup v1 memory controller at {V1_MEMORY} (the v2 demo is not built yet)");
    }
    let root = root();
    sh(Command::new("cargo").current_dir(&root).args(["build", "-p", "monitor", "-p", "monitor-tests", "--bins"]))?;
    let bin = root.join("target/debug");
    let listen = match args.listen {
        Some(a) => a,
        None => TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).context("finding a free port")?,
    };
    let mut demo = Demo::create(args.limit_mib)?;
    demo.play(&bin, listen, &args)
}

struct Hog {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    mib: u64,
}

impl Hog {
    /// Starts alloc-hog inside the group: the shell joins the group first, then execs, so every page is charged
    /// to it.
    fn spawn(bin: &Path, cgroup: &Path, mib: u64) -> Result<Hog> {
        let script = r#"echo $$ > "$1/cgroup.procs" && exec "$2" "$3""#;
        let mut child = Command::new("sh")
            .args(["-c", script, "sh"])
            .arg(cgroup)
            .arg(bin)
            .arg(mib.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting alloc-hog")?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("alloc-hog started without pipes");
        };
        let mut hog = Hog { child, stdin, stdout: BufReader::new(stdout), mib };
        hog.reply("ready")?;
        Ok(hog)
    }

    fn reply(&mut self, word: &str) -> Result<()> {
        let mut line = String::new();
        self.stdout.read_line(&mut line).context("reading from alloc-hog")?;
        if !line.starts_with(word) {
            bail!("alloc-hog {}: expected {word:?}, got {line:?} (OOM-killed?)", self.child.id());
        }
        Ok(())
    }

    fn set(&mut self, mib: u64) -> Result<()> {
        writeln!(self.stdin, "set {mib}").context("writing to alloc-hog")?;
        self.reply("ok")?;
        self.mib = mib;
        Ok(())
    }
}

/// Everything the demo started; dropped = stopped and removed.
struct Demo {
    cgroup: PathBuf,
    hogs: Vec<Hog>,
    agent: Option<Child>,
    watchdog: Option<Child>,
}

impl Demo {
    fn create(limit_mib: u64) -> Result<Demo> {
        let cgroup = Path::new(V1_MEMORY).join(format!("monitor-demo-{}", std::process::id()));
        std::fs::create_dir(&cgroup).with_context(|| format!("creating {}", cgroup.display()))?;
        let mut demo = Demo { cgroup, hogs: Vec::new(), agent: None, watchdog: None };
        let limit = limit_mib * 1024 * 1024;
        std::fs::write(demo.cgroup.join("memory.limit_in_bytes"), limit.to_string()).context("setting the limit")?;
        // The watchdog ignores Ctrl-C and waits for its stdin to close (this process ending, however it ends),
        // then kills what is left in the group and removes it.
        let script = r#"trap '' INT TERM HUP; cat >/dev/null
[ -d "$1" ] || exit 0
for p in $(cat "$1/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
i=0; while [ $i -lt 50 ]; do rmdir "$1" 2>/dev/null && exit 0; sleep 0.1; i=$((i+1)); done"#;
        let watchdog = Command::new("sh")
            .args(["-c", script, "sh"])
            .arg(&demo.cgroup)
            .stdin(Stdio::piped())
            .process_group(0)
            .spawn()
            .context("starting the cleanup watchdog")?;
        demo.watchdog = Some(watchdog);
        Ok(demo)
    }

    fn play(&mut self, bin: &Path, listen: SocketAddr, args: &Args) -> Result<()> {
        let share = |f: f64| (args.limit_mib as f64 * f).round() as u64;
        let (_, first) = STEPS[0];
        for f in first {
            self.hogs.push(Hog::spawn(&bin.join("alloc-hog"), &self.cgroup, share(f))?);
        }
        let monitor = bin.join("monitor");
        let agent = Command::new(&monitor)
            .arg("agent")
            .arg("--cgroup")
            .arg(&self.cgroup)
            .args(["--listen", &listen.to_string(), "--interval-ms", "100"])
            .stdin(Stdio::null())
            .spawn()
            .context("starting monitor agent")?;
        self.agent = Some(agent);
        wait_listening(listen, Duration::from_secs(15))?;
        let url = format!("http://{listen}");
        println!(
            "\nagent API: {url}/api/v1/status   group: {}   limit: {} MiB\n",
            self.cgroup.display(),
            args.limit_mib
        );
        for (i, (what, shares)) in STEPS.iter().enumerate() {
            // Shrink the largest first and grow the smallest first, so the total moves one way only.
            let mut order: Vec<usize> = (0..self.hogs.len()).collect();
            order.sort_by_key(|&h| self.hogs[h].mib);
            if shares.iter().sum::<f64>() < self.hogs.iter().map(|h| h.mib as f64).sum::<f64>() / args.limit_mib as f64
            {
                order.reverse();
            }
            for h in order {
                self.hogs[h].set(share(shares[h]))?;
            }
            let sizes: Vec<String> = self.hogs.iter().map(|h| format!("{} MiB", h.mib)).collect();
            println!("== step {}: {what} ({})", i + 1, sizes.join(" + "));
            std::thread::sleep(Duration::from_millis(args.step_ms));
            let status = Command::new(&monitor).args(["status", "--url", &url]).status();
            if !status.as_ref().is_ok_and(|s| s.success()) {
                bail!("monitor status --url {url} failed: {status:?}");
            }
            println!();
        }
        Ok(())
    }
}

/// Waits until something accepts connections on `addr`.
fn wait_listening(addr: SocketAddr, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if Instant::now() >= deadline {
            bail!("monitor agent is not listening on {addr} after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

impl Drop for Demo {
    fn drop(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            // Ask politely, then insist.
            let _ = Command::new("kill").args(["-TERM", &agent.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(3);
            while matches!(agent.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = agent.kill();
            let _ = agent.wait();
        }
        for mut hog in self.hogs.drain(..) {
            let _ = hog.child.kill();
            let _ = hog.child.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.cgroup.exists() && std::fs::remove_dir(&self.cgroup).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(mut w) = self.watchdog.take() {
            drop(w.stdin.take());
            let _ = w.wait();
        }
        if self.cgroup.exists() {
            eprintln!("warning: could not remove {}", self.cgroup.display());
        } else {
            eprintln!("demo: stopped the agent and the processes, removed {}", self.cgroup.display());
        }
    }
}
