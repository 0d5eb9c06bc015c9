//! The `monitor` command line: parses it and calls the part that does the work (`agent` and `run` build one
//! [`Agent`]; `status`, `check-config` and `report` read what an agent wrote).

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser, Subcommand};
use monitor::agent::Agent;
use monitor::config::Config;
use monitor::view::StatusView;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// The environment the commands read, shown under `--help` and in the man page.
const ENVIRONMENT: &str = "Environment:
  MONITOR_LOG  What `agent` and `run` log, as tracing directives: a level (`debug`) or levels per
               module (`info,monitor::sampler=debug`). Default: info. An invalid value stops start-up.";

/// `--version`: the version, the commit and whether the eBPF object is built in.
static LONG_VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(monitor::sources::build::long_version);

#[derive(Parser)]
#[command(
    name = "monitor",
    version = LONG_VERSION.as_str(),
    about = "Guards the memory of a group of server processes sharing one cgroup",
    after_help = ENVIRONMENT
)]
struct Cli {
    /// How the agent writes its log on stderr: `text` lines (with syslog priorities when stderr is the journal), or
    /// `json`, one object per line.
    #[arg(long, global = true, value_enum, default_value_t, value_name = "FORMAT")]
    log_format: monitor::base::logs::LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The daemon: samples the group, decides, serves the API.
    Agent(AgentArgs),
    /// Prints the group as a table, from a running agent.
    Status {
        /// The agent's base URL (default: from the config's `[web] listen`, else http://127.0.0.1:9464).
        #[arg(long)]
        url: Option<String>,
        /// The agent's config, whose `[web] listen` says where it answers (default: /etc/monitor/agent.toml when it
        /// exists).
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
        /// Under `[cluster]`: one row per member (state, group memory, policy, requests), each fetched from that
        /// member's own API.
        #[arg(long)]
        cluster: bool,
    },
    /// Validates a config file: names every bad key with its line (a TOML syntax error stops at the first).
    CheckConfig {
        /// The config file (or -c FILE).
        #[arg(required_unless_present = "config", conflicts_with = "config")]
        file: Option<PathBuf>,
        /// The config file.
        #[arg(short, long)]
        config: Option<PathBuf>,
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
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Writes the man pages (DIR/man) and shell completions (DIR/completions) of this command line.
    #[command(hide = true)]
    GenerateDocs {
        /// The folder to write into (created when missing).
        dir: PathBuf,
    },
}

#[derive(clap::Args)]
struct ReportArgs {
    /// The config whose `[stats] path` names the database (default: /etc/monitor/agent.toml when it exists).
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// The database (instead of the config's).
    #[arg(long)]
    db: Option<PathBuf>,
    /// The UTC day: `today` (the default), `yesterday` or YYYY-MM-DD.
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
    /// TOML config file (default: /etc/monitor/agent.toml when it exists, else the built-in defaults).
    #[arg(short, long)]
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
    // The daemons reload on SIGHUP: until their handler exists, a hangup must not end them. The other commands
    // keep the default action.
    monitor::base::hangup::ignore_until_handled();
    let cli = Cli::parse();
    if !matches!(cli.cmd, Cmd::Agent(_) | Cmd::Run { .. }) {
        monitor::base::hangup::default_in_child();
    }
    // The agent keeps about one descriptor per process of the group (past the limit it reads the rest by
    // open-read-close); `run` adds the front door's connections. Children get the limit they would have had.
    let _ = monitor::sources::procs::raise_fd_limit();
    let result = match cli.cmd {
        Cmd::Agent(a) => agent_config(&a).and_then(|cfg| {
            monitor::base::logs::init(cli.log_format)?;
            Ok(Agent::guard(cfg)?.reading(agent_source(&a)).run()?)
        }),
        Cmd::Status { url, config, json, cluster } => status(url, config, json, cluster),
        Cmd::Report(r) => report(r),
        Cmd::Run { config } => monitor::base::logs::init(cli.log_format)
            .map_err(Into::into)
            .and_then(|()| Config::load(&config).map_err(Into::into))
            .and_then(|cfg| Ok(Agent::launch(cfg, &config)?.run()?)),
        Cmd::CheckConfig { file, config, mode } => check_config(file.or(config).unwrap_or_default(), mode),
        Cmd::GenerateDocs { dir } => generate_docs(&dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("monitor: {}", describe(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each said once: a cause whose text the message already holds (an error that prints
/// its source, wrapped by one that does too) is not repeated.
fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

fn generate_docs(dir: &std::path::Path) -> Result<()> {
    for file in monitor::commands::docs::write(Cli::command(), dir)? {
        println!("{}", file.display());
    }
    Ok(())
}

/// The config the agent and the report read when no `-c` is given, when it exists.
const DEFAULT_CONFIG: &str = "/etc/monitor/agent.toml";

fn default_config(given: Option<PathBuf>) -> Option<PathBuf> {
    given.or_else(|| Some(PathBuf::from(DEFAULT_CONFIG)).filter(|p| p.exists()))
}

fn check_config(file: PathBuf, mode: Option<monitor::config::Mode>) -> Result<()> {
    match monitor::config::check(&file, mode) {
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
    }
}

/// Where SIGHUP reads the agent's config again: the same file, the same overrides.
fn agent_source(a: &AgentArgs) -> monitor::config::Source {
    monitor::config::Source {
        file: default_config(a.config.clone()),
        cgroup: a.cgroup.clone(),
        listen: a.listen.map(|l| l.to_string()),
        interval_ms: a.interval_ms,
    }
}

/// The config file (or the defaults) with the command line's overrides, checked again.
fn agent_config(a: &AgentArgs) -> Result<Config> {
    let mut cfg = match default_config(a.config.clone()) {
        Some(path) => Config::load(&path)?,
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
        // A value given on the command line is named by its flag.
        let key = monitor::config::key_name(&p.key);
        let flag = match key.as_str() {
            "group.cgroup" if a.cgroup.is_some() => "--cgroup".to_string(),
            "web.listen" if a.listen.is_some() => "--listen".to_string(),
            "policy.interval_ms" if a.interval_ms.is_some() => "--interval-ms".to_string(),
            _ => key,
        };
        bail!("{flag}: {}", p.msg);
    }
    Ok(cfg)
}

fn status(url: Option<String>, config: Option<PathBuf>, json: bool, cluster: bool) -> Result<()> {
    let base = match (url, default_config(config)) {
        (Some(u), _) => u,
        (None, Some(c)) => format!("http://{}", Config::load(&c)?.web.listen),
        (None, None) => "http://127.0.0.1:9464".into(),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    if cluster {
        return rt.block_on(cluster_status(&base, json));
    }
    let url = format!("{}/api/v1/status", base.trim_end_matches('/'));
    let body = rt.block_on(monitor::config::client::get(&url)).map_err(|e| match e {
        monitor::config::client::ClientError::Connect(_, io) => anyhow::anyhow!(
            "no monitor agent answers at {base} ({io}): start one with `monitor agent`, or name where it listens \
             with --url or -c CONFIG"
        ),
        e => e.into(),
    })?;
    // Checked with --json too: a server that is not a monitor (an HTML page, another JSON API) is an error, not
    // output.
    let v: StatusView = serde_json::from_str(&body)
        .with_context(|| format!("{url}: not a monitor status document (is a monitor agent listening there?)"))?;
    if json {
        println!("{body}");
        return Ok(());
    }
    print!("{}", monitor::commands::table::render(&v));
    Ok(())
}

/// `monitor status --cluster`: the fleet as the node at `base` keeps it (`/api/v1/cluster/fleet`); from a node that
/// does not serve it, or has not asked every live member yet, its cluster view and then every live member's status
/// from its own API (at most 3 s each, all at once).
async fn cluster_status(base: &str, json: bool) -> Result<()> {
    use monitor::cluster::api::ClusterView;
    if !json {
        let url = format!("{}/api/v1/cluster/fleet", base.trim_end_matches('/'));
        let fleet = monitor::config::client::get(&url).await.ok().and_then(|b| serde_json::from_str(&b).ok());
        if let Some(fleet) = fleet.filter(monitor::commands::table::fleet_complete) {
            print!("{}", monitor::commands::table::render_fleet(&fleet));
            return Ok(());
        }
    }
    let url = format!("{}/api/v1/cluster", base.trim_end_matches('/'));
    let body = monitor::config::client::get(&url).await.map_err(|e| match e {
        monitor::config::client::ClientError::Status(_, 404) => {
            anyhow::anyhow!("{url}: 404: this monitor is not in a cluster (its config has no [cluster])")
        }
        e => e.into(),
    })?;
    if json {
        println!("{body}");
        return Ok(());
    }
    let view: ClusterView =
        serde_json::from_str(&body).with_context(|| format!("{url}: not a monitor cluster document"))?;
    let mut asks = tokio::task::JoinSet::new();
    // Patient beside the fleet poller's 1 s: a person waits for this once.
    let bounds = monitor::config::client::Bounds {
        timeout: std::time::Duration::from_secs(3),
        ..monitor::cluster::fleet::BOUNDS
    };
    for m in view.members.iter().filter(|m| m.state.is_live()) {
        let (node, url) = (m.node.clone(), format!("http://{}/api/v1/status", m.web));
        asks.spawn(async move {
            let asked = async {
                let parsed: monitor::config::HttpUrl = url.parse()?;
                monitor::config::client::fetch(&parsed, bounds).await
            };
            let got = match asked.await {
                Ok(body) => serde_json::from_slice::<StatusView>(&body).map_err(|e| format!("{url}: {e}")),
                Err(e) => Err(e.to_string()),
            };
            (node, got)
        });
    }
    let statuses = asks.join_all().await;
    print!("{}", monitor::commands::table::render_cluster(&view, &statuses));
    Ok(())
}

fn report(r: ReportArgs) -> Result<()> {
    use monitor::commands::report;
    let db = match (r.db, default_config(r.config)) {
        (Some(db), _) => db,
        (None, Some(c)) => Config::load(&c)?.stats.path.ok_or(report::ReportError::NoDatabase)?,
        (None, None) => Config::default().stats.path.ok_or(report::ReportError::NoDatabase)?,
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let day = report::parse_day(r.date.as_deref().unwrap_or("today"), now)?;
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
