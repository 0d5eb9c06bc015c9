//! The `monitor` command line: parses it and calls the part that does the work (`agent` and `run` build one
//! [`Agent`]; `status`, `check-config` and `report` read what an agent wrote).

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use monitor::agent::Agent;
use monitor::api::StatusView;
use monitor::config::Config;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// `--version`: the version, the commit and whether the eBPF object is built in.
static LONG_VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(monitor::build::long_version);

#[derive(Parser)]
#[command(name = "monitor", version = LONG_VERSION.as_str(), about = "Guards the memory of a group of server processes sharing one cgroup")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The daemon: samples the group, decides, serves the API.
    Agent(AgentArgs),
    /// Prints the group as a table, from a running agent.
    Status {
        /// The agent's base URL.
        #[arg(long, default_value = "http://127.0.0.1:9464")]
        url: String,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
    },
    /// Validates a config file: names every bad key with its line (a TOML syntax error stops at the first).
    CheckConfig {
        file: PathBuf,
        /// The command the file is for, `agent` or `run` (default: `run` when it lists a `[[process]]`): `run`
        /// needs a `[[process]]`; for `agent`, the run-only keys are named as ignored.
        #[arg(long)]
        mode: Option<monitor::config::Mode>,
    },
    /// The day's report from the stats database: memory, requests, refusals, aborts, restarts per process.
    Report(ReportArgs),
    /// The launcher, the front door and the agent in one process: starts `[[process]]`, proxies `[proxy] listen`.
    Run {
        /// TOML config file.
        #[arg(long)]
        config: PathBuf,
    },
}

#[derive(clap::Args)]
struct ReportArgs {
    /// The config whose `[stats] path` names the database.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The database (instead of the config's).
    #[arg(long)]
    db: Option<PathBuf>,
    /// The UTC day, YYYY-MM-DD (default: today).
    #[arg(long)]
    date: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Also draw the day (memory per process, requests) as a PNG at FILE.
    #[arg(long, value_name = "FILE")]
    png: Option<PathBuf>,
}

#[derive(clap::Args)]
struct AgentArgs {
    /// TOML config file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The group's cgroup: `auto`, an absolute path under /sys/fs/cgroup, or relative to the memory mount.
    #[arg(long)]
    cgroup: Option<String>,
    /// API address (default 127.0.0.1:9464).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Sampling interval in milliseconds (default 100).
    #[arg(long)]
    interval_ms: Option<u64>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The agent keeps about one descriptor per process of the group (past the limit it reads the rest by
    // open-read-close); `run` adds the front door's connections. Children get the limit they would have had.
    let _ = monitor::procs::raise_fd_limit();
    let result = match cli.cmd {
        Cmd::Agent(a) => agent_config(&a).and_then(|cfg| {
            init_logs();
            Ok(Agent::guard(cfg)?.run()?)
        }),
        Cmd::Status { url, json } => status(&url, json),
        Cmd::Report(r) => report(r),
        Cmd::Run { config } => {
            init_logs();
            Config::load(&config).map_err(Into::into).and_then(|cfg| Ok(Agent::launch(cfg, &config)?.run()?))
        }
        Cmd::CheckConfig { file, mode } => match monitor::config::check(&file, mode) {
            Ok(checked) => {
                for w in &checked.warnings {
                    eprintln!("monitor: warning: {w}");
                }
                println!("{}: ok for monitor {}", file.display(), checked.mode.as_str());
                Ok(())
            }
            // One problem is the error; several are each printed, then counted.
            Err(mut problems) if problems.len() == 1 => Err(problems.remove(0).into()),
            Err(problems) => {
                for p in &problems {
                    eprintln!("monitor: {p}");
                }
                Err(anyhow::anyhow!("{}: {} problems", file.display(), problems.len()))
            }
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("monitor: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MONITOR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

/// The config file (or the defaults) with the command line's overrides, checked again.
fn agent_config(a: &AgentArgs) -> Result<Config> {
    let mut cfg = match &a.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(c) = &a.cgroup {
        cfg.group.cgroup.clone_from(c);
    }
    if let Some(l) = a.listen {
        cfg.web.listen = l.to_string();
    }
    if let Some(i) = a.interval_ms {
        cfg.policy.interval_ms = i;
    }
    if let Some(p) = cfg.validate().into_iter().next() {
        bail!("{}: {}", monitor::config::key_name(&p.key), p.msg);
    }
    Ok(cfg)
}

fn status(url: &str, json: bool) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let url = format!("{}/api/v1/status", url.trim_end_matches('/'));
    let body = rt.block_on(monitor::client::get(&url))?;
    // Checked with --json too: a server that is not a monitor (an HTML page, another JSON API) is an error, not
    // output.
    let v: StatusView = serde_json::from_str(&body)
        .with_context(|| format!("{url}: not a monitor status document (is a monitor agent listening there?)"))?;
    if json {
        println!("{body}");
        return Ok(());
    }
    print!("{}", monitor::table::render(&v));
    Ok(())
}

fn report(r: ReportArgs) -> Result<()> {
    use monitor::report;
    let db = match (r.db, r.config) {
        (Some(db), _) => db,
        (None, Some(c)) => Config::load(&c)?.stats.path.ok_or(report::ReportError::NoDatabase)?,
        (None, None) => Config::default().stats.path.ok_or(report::ReportError::NoDatabase)?,
    };
    let day = match &r.date {
        Some(d) => report::parse_date(d)?,
        None => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs());
            now.unwrap_or(0) / 86_400 * 86_400
        }
    };
    let (day_report, minutes, labels) = report::load(&db, day)?;
    if let Some(file) = &r.png {
        let done = report::png::write_png(file, &day_report, &minutes, &labels, day)?;
        eprintln!("{}", report::png::describe(file, &done));
    }
    let out = if r.json { serde_json::to_string_pretty(&day_report)? + "\n" } else { report::text(&day_report) };
    use std::io::Write;
    let _ = std::io::stdout().write_all(out.as_bytes()); // a closed pipe (| head) is not an error
    Ok(())
}
