//! The `monitor` command line: `agent`, `status`, `check-config`.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use monitor::api::{self, ApiState, StatusView};
use monitor::cgroup::{self, Mounts};
use monitor::config::Config;
use monitor::sampler;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "monitor", version, about = "Guards the memory of a group of server processes sharing one cgroup")]
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
        Cmd::Agent(a) => agent(a),
        Cmd::Status { url, json } => status(&url, json),
        Cmd::Report(r) => report(r),
        Cmd::Run { config } => {
            init_logs();
            monitor::run::run(&config).map_err(Into::into)
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

fn agent(a: AgentArgs) -> Result<()> {
    let cfg = agent_config(&a)?;
    init_logs();
    let mounts = Mounts::read().context("reading /proc/self/mountinfo")?;
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let group = cgroup::resolve(&cfg.group.cgroup, &mounts, &own)?;
    let sampler::Started { sampler, thresholds, state, first } = sampler::start(group, &cfg)?;
    let listen: SocketAddr = cfg.web.listen.parse().context("web.listen")?;
    // Two workers: a probe is answered by one while the other is busy with a crowd of clients (the renders run on
    // threads of their own).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("listening on {listen}"))?;
        let (feed, rx) = sampler::Feed::new(first);
        // Alerts, actions and history read every sample from the first on; the Raiser is for other parts (the
        // stats database) to raise conditions.
        let alerts = monitor::alerts::task::spawn(
            &cfg.alerts,
            feed.subscribe("alerts"),
            cfg.probes.enabled,
            format!("http://{listen}/"),
        );
        let admin_url = cfg.actions.admin_path.clone().map(monitor::actions::admin_url_by_port);
        let reactions = Arc::new(monitor::reaction::Reactions::new());
        monitor::actions::spawn(&cfg.actions, feed.subscribe("actions"), admin_url, reactions.clone());
        let history = monitor::history::spawn(
            rx.clone(),
            feed.subscribe("history"),
            &cfg.stats,
            thresholds.clone(),
            monitor::history::Inputs { reactions: Some(reactions), ..Default::default() },
        );
        let stop = Arc::new(AtomicBool::new(false));
        let interval = Duration::from_millis(cfg.policy.interval_ms);
        let handle = sampler::spawn(sampler, thresholds.clone(), interval, state, feed, stop.clone())
            .context("starting the sampler thread")?;
        tracing::info!(%listen, "serving the API");
        if let Some(raiser) = alerts {
            let h = history.history.clone();
            tokio::spawn(monitor::alerts::watch::stats(Arc::new(move || h.note()), raiser));
        }
        let app = api::router(ApiState { latest: rx, thresholds, launcher: None, interval }).merge(history.router());
        api::serve(listener, app, shutdown_signal()).await;
        stop.store(true, Ordering::Relaxed);
        let _ = handle.join();
        history.close(Duration::from_secs(3)).await;
        tracing::info!("stopped");
        Ok(())
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot watch SIGTERM: {e}");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
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
