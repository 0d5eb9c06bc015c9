//! Where notifications go: a command (argv, no shell, JSON on stdin and `MONITOR_*` variables), a webhook (the
//! Alertmanager webhook JSON, version 4) and an Alertmanager (`POST /api/v2/alerts`). Each sink is its own task
//! behind a bounded queue, so a slow or dead one delays nothing else; HTTP sends are retried with backoff and a
//! sink that is down is reported once, not per notification.

use super::{rfc3339, Notification, Status};
use crate::base::nocaps::{self, Ids};
use crate::base::ordered;
use crate::config::{AlertsConfig, HttpUrl};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

/// Queue depth per sink (batches); past it the oldest are dropped (and said once).
const QUEUE: usize = 256;
/// HTTP attempts per batch, with 0.5, 1, 2, 4 s between them.
const ATTEMPTS: u32 = 5;

/// Alertmanager's "no end" time.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// One alert as JSON (the webhook's `alerts[]` element; also the command's stdin).
pub(crate) fn alert_json(n: &Notification, generator_url: &str) -> Value {
    json!({
        "status": n.status,
        "labels": n.labels,
        "annotations": n.annotations,
        "startsAt": rfc3339(n.starts_at),
        "endsAt": n.ends_at.map(rfc3339).unwrap_or_else(|| ZERO_TIME.into()),
        "generatorURL": generator_url,
        "fingerprint": n.fingerprint,
    })
}

/// The Alertmanager webhook document (version 4) for notifications of one status.
pub(crate) fn webhook_json(batch: &[Notification], generator_url: &str) -> Value {
    let status = if batch.iter().all(|n| n.status == Status::Resolved) { "resolved" } else { "firing" };
    let common = |pick: fn(&Notification) -> &std::collections::BTreeMap<String, String>| {
        let mut it = batch.iter().map(pick);
        let first = it.next().cloned().unwrap_or_default();
        let rest: Vec<_> = it.collect();
        first
            .into_iter()
            .filter(|(k, v)| rest.iter().all(|m| m.get(k) == Some(v)))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let common_labels = common(|n| &n.labels);
    let group_labels: std::collections::BTreeMap<_, _> =
        common_labels.iter().filter(|(k, _)| k.as_str() == "alertname").collect();
    json!({
        "version": "4",
        "groupKey": format!("{{}}:{{alertname={:?}}}", group_labels.get(&"alertname".to_string()).map(|s| s.as_str()).unwrap_or("")),
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "monitor",
        "groupLabels": group_labels,
        "commonLabels": common_labels,
        "commonAnnotations": common(|n| &n.annotations),
        "externalURL": generator_url,
        "alerts": batch.iter().map(|n| alert_json(n, generator_url)).collect::<Vec<_>>(),
    })
}

/// The body of `POST /api/v2/alerts`.
pub(crate) fn alertmanager_json(batch: &[Notification], generator_url: &str) -> Value {
    Value::Array(
        batch
            .iter()
            .map(|n| {
                let mut v = json!({
                    "labels": n.labels,
                    "annotations": n.annotations,
                    "startsAt": rfc3339(n.starts_at),
                    "generatorURL": generator_url,
                });
                if let Some(end) = n.ends_at {
                    v["endsAt"] = json!(rfc3339(end));
                }
                v
            })
            .collect(),
    )
}

/// `MONITOR_*` variables for the command: status, name, fingerprint, times, and every label and annotation
/// (`MONITOR_LABEL_<KEY>`, `MONITOR_ANNOTATION_<KEY>`, keys upper-cased, other characters as `_`).
pub(crate) fn command_env(n: &Notification) -> Vec<(String, String)> {
    let key = |prefix: &str, k: &str| {
        let k: String =
            k.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
        format!("{prefix}{k}")
    };
    let mut env = vec![
        (
            "MONITOR_ALERT_STATUS".to_string(),
            if n.status == Status::Firing { "firing" } else { "resolved" }.to_string(),
        ),
        ("MONITOR_ALERT_NAME".to_string(), n.labels.get("alertname").cloned().unwrap_or_default()),
        ("MONITOR_ALERT_FINGERPRINT".to_string(), n.fingerprint.clone()),
        ("MONITOR_ALERT_STARTS_AT".to_string(), rfc3339(n.starts_at)),
        ("MONITOR_ALERT_ENDS_AT".to_string(), n.ends_at.map(rfc3339).unwrap_or_default()),
    ];
    env.extend(n.labels.iter().map(|(k, v)| (key("MONITOR_LABEL_", k), v.clone())));
    env.extend(n.annotations.iter().map(|(k, v)| (key("MONITOR_ANNOTATION_", k), v.clone())));
    env
}

/// A running sink: push notifications; it sends them in order on its own task, behind a queue of [`QUEUE`]
/// batches that drops its oldest when full (the newest batches carry the present state: a resolution must not be
/// lost behind stale re-sends), said once until the sink has caught up.
#[derive(Clone)]
pub struct SinkHandle(ordered::Sender<Vec<Notification>>);

impl SinkHandle {
    /// A queue for a sink called `name`, and the handle that fills it.
    fn new(name: &'static str) -> (SinkHandle, ordered::Receiver<Vec<Notification>>) {
        let (tx, rx) = ordered::channel(format!("alert sink {name}"), QUEUE);
        (SinkHandle(tx), rx)
    }

    /// Queues a batch without waiting; a sink far behind (or hung) loses its oldest batches, said once.
    pub fn push(&self, batch: Vec<Notification>) {
        if batch.is_empty() {
            return;
        }
        // Refused only once the sink's task has ended, and then there is nobody to send it.
        let _ = self.0.push(batch);
    }
}

/// Starts the command sink of `cfg` (its `command`) on `tasks`: one run per notification, sequential (so at most
/// one run per alert at a time). Under a root agent each run is as `command_user`, looked up once here; when it
/// cannot be, nothing runs (never as root) and each notification says so. Its task ends once every handle is
/// dropped and what it holds is done.
pub fn command(cfg: &AlertsConfig, argv: Vec<String>, generator_url: String, tasks: &mut JoinSet<()>) -> SinkHandle {
    let (handle, queue) = SinkHandle::new("command");
    let timeout = Duration::from_secs(cfg.command_timeout_s);
    let user = if nocaps::is_root() { cfg.command_ids().map(Some).map_err(|e| e.to_string()) } else { Ok(None) };
    tasks.spawn(async move {
        while let Some(batch) = queue.next().await {
            for n in batch {
                match &user {
                    Ok(user) => run_command(&argv, *user, &n, timeout, &generator_url).await,
                    Err(e) => {
                        let alert = n.labels.get("alertname").map(String::as_str).unwrap_or("");
                        tracing::error!(alert, "alert command not run: [alerts] command_user: {e}");
                    }
                }
            }
        }
    });
    handle
}

/// The `PATH` of an alert command: its environment is this and the alert's `MONITOR_*` variables, nothing of the
/// agent's.
const COMMAND_PATH: &str = "/usr/bin:/bin";

/// Output kept per stream of an alert command, for the log.
const OUTPUT_KEPT: usize = 2000;
/// How long a command's output may still arrive after it exited (its pipes close when it does, unless it left a
/// child of its own holding them).
const OUTPUT_GRACE: Duration = Duration::from_millis(200);

/// Drains `r` to its end in the background, keeping its first [`OUTPUT_KEPT`] bytes in the returned buffer. Reading
/// to the end keeps a chatty command from blocking on a full pipe.
fn keep_output(
    r: Option<impl AsyncRead + Unpin + Send + 'static>,
) -> (Arc<Mutex<Vec<u8>>>, tokio::task::JoinHandle<()>) {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let into = kept.clone();
    let task = tokio::spawn(async move {
        let Some(mut r) = r else { return };
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = r.read(&mut buf).await {
            let mut v = into.lock().unwrap_or_else(|e| e.into_inner());
            let room = OUTPUT_KEPT.saturating_sub(v.len());
            v.extend_from_slice(&buf[..n.min(room)]);
        }
    });
    (kept, task)
}

/// Runs the command for one notification, as `user` when given. It is done when it exits (a child it leaves running
/// is its own business); one that runs past `timeout` is killed with every process in its process group (its
/// children, unless they left it).
async fn run_command(argv: &[String], user: Option<Ids>, n: &Notification, timeout: Duration, generator_url: &str) {
    let Some((prog, args)) = argv.split_first() else { return };
    let alert = n.labels.get("alertname").map(String::as_str).unwrap_or("");
    let body = alert_json(n, generator_url).to_string();
    let mut cmd = tokio::process::Command::new(prog);
    // Its descriptors: the three pipes (the alert on stdin, the output for the log), and nothing else of the agent's.
    cmd.args(args)
        .env_clear()
        .env("PATH", COMMAND_PATH)
        .envs(command_env(n))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // The command gets none of the agent's privileges (crate::base::nocaps).
    let last_cap = nocaps::last_cap();
    // SAFETY: the closure runs between fork and exec and only makes the async-signal-safe calls of `drop_all`, with
    // numbers computed before the fork.
    unsafe {
        cmd.pre_exec(move || nocaps::drop_all(last_cap, user));
    }
    let mut child = match crate::base::reaper::spawn(&mut cmd) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(command = %prog, alert, "alert command cannot start: {e}");
            return;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its stdin must not block us: write in the background.
        tokio::spawn(async move {
            let _ = stdin.write_all(body.as_bytes()).await;
        });
    }
    let (out, out_task) = keep_output(child.stdout.take());
    let (err, err_task) = keep_output(child.stderr.take());
    let group = child.id().and_then(|pid| libc::pid_t::try_from(pid).ok());
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => {
            let _ = tokio::time::timeout(OUTPUT_GRACE, async {
                let _ = out_task.await;
                let _ = err_task.await;
            })
            .await;
            let text = |b: &Mutex<Vec<u8>>| {
                String::from_utf8_lossy(&b.lock().unwrap_or_else(|e| e.into_inner())).trim().to_string()
            };
            let (stdout, stderr) = (text(&out), text(&err));
            if status.success() {
                tracing::info!(command = %prog, alert, status = ?n.status, %stdout, %stderr, "alert command ran");
            } else {
                // The alert did not get through: a warning, with how the command ended and what it said.
                tracing::warn!(command = %prog, alert, status = ?n.status, %stdout, %stderr,
                    "alert command failed: {status}");
            }
        }
        Ok(Err(e)) => tracing::warn!(command = %prog, alert, "alert command failed: {e}"),
        Err(_) => {
            if let Some(pgid) = group {
                // SAFETY: killpg has no memory-safety preconditions. The group is the one the command was started
                // in (process_group(0): its id is the command's pid, not yet reaped, so not reused).
                unsafe { libc::killpg(pgid, libc::SIGKILL) };
            }
            let _ = child.kill().await;
            tracing::warn!(command = %prog, alert, timeout_s = timeout.as_secs(), "alert command timed out: killed")
        }
    }
}

/// The longest `Retry-After` a sink waits before its next attempt (a longer one is cut to this).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Whether a failed send is tried again.
#[derive(Debug, PartialEq)]
enum Retry {
    /// No: the receiver refused this request (a 4xx other than 429), and the same request would be refused again.
    Never,
    /// After what the receiver asked (`Retry-After` on a 429 or a 5xx).
    After(Duration),
    /// After the sink's own backoff (no answer, or no `Retry-After`).
    Backoff,
}

fn retry(e: &crate::config::client::ClientError) -> Retry {
    match e {
        crate::config::client::ClientError::Refused { status, .. } if (400..500).contains(status) && *status != 429 => {
            Retry::Never
        }
        crate::config::client::ClientError::Refused { retry_after: Some(d), .. } => Retry::After(*d),
        _ => Retry::Backoff,
    }
}

/// Starts an HTTP sink on `tasks`, posting `render(batch)` to `url`, with retries and a once-only "down" report.
pub fn http(
    name: &'static str,
    url: HttpUrl,
    client: crate::config::client::Client,
    generator_url: String,
    render: fn(&[Notification], &str) -> Value,
    tasks: &mut JoinSet<()>,
) -> SinkHandle {
    let (handle, queue) = SinkHandle::new(name);
    tasks.spawn(async move {
        let mut down = false;
        while let Some(batch) = queue.next().await {
            let body = render(&batch, &generator_url).to_string();
            let mut delay = Duration::from_millis(500);
            let mut last_err = String::new();
            let mut sent = false;
            for attempt in 1..=ATTEMPTS {
                let wait = match client.post_json(&url, &body).await {
                    Ok(()) => {
                        sent = true;
                        break;
                    }
                    Err(e) => {
                        last_err = e.to_string();
                        match retry(&e) {
                            Retry::Never => break,
                            Retry::After(d) => d.min(MAX_RETRY_AFTER),
                            Retry::Backoff => delay,
                        }
                    }
                };
                if attempt < ATTEMPTS {
                    tokio::time::sleep(wait).await;
                    delay *= 2;
                }
            }
            if sent && down {
                tracing::info!(sink = name, %url, "alert sink is reachable again");
                down = false;
            } else if !sent && !down {
                tracing::warn!(sink = name, %url, "alert sink is down: {last_err} (reported once until it recovers)");
                down = true;
            }
        }
    });
    handle
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::time::SystemTime;

    fn n(status: Status) -> Notification {
        let mut labels = BTreeMap::new();
        labels.insert("alertname".to_string(), "MonitorGroupRefusing".to_string());
        labels.insert("cgroup".to_string(), "/g".to_string());
        let mut annotations = BTreeMap::new();
        annotations.insert("summary".to_string(), "a \"quoted\"\nname; $(rm -rf /)".to_string());
        Notification {
            status,
            fingerprint: "0123456789abcdef".into(),
            labels,
            annotations,
            starts_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            ends_at: (status == Status::Resolved).then(|| SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_060)),
        }
    }

    /// A batch told apart by its fingerprint.
    fn numbered(i: usize) -> Vec<Notification> {
        let mut one = n(Status::Firing);
        one.fingerprint = i.to_string();
        vec![one]
    }

    #[test]
    fn a_refusal_is_not_retried_unless_it_says_when() {
        use crate::config::client::ClientError::Refused;
        let refused = |status, retry_after| Refused { url: "u".into(), status, retry_after };
        assert_eq!(retry(&refused(400, None)), Retry::Never);
        assert_eq!(retry(&refused(404, Some(Duration::from_secs(3)))), Retry::Never);
        assert_eq!(retry(&refused(429, Some(Duration::from_secs(3)))), Retry::After(Duration::from_secs(3)));
        assert_eq!(retry(&refused(429, None)), Retry::Backoff);
        assert_eq!(retry(&refused(503, Some(Duration::from_secs(1)))), Retry::After(Duration::from_secs(1)));
        assert_eq!(retry(&refused(500, None)), Retry::Backoff);
        assert_eq!(
            retry(&crate::config::client::ClientError::Timeout("u".into(), Duration::from_secs(5))),
            Retry::Backoff
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_sink_sends_what_was_queued_then_ends_with_its_last_handle() {
        let (handle, queue) = SinkHandle::new("test");
        let other = handle.clone();
        handle.push(numbered(1));
        handle.push(Vec::new());
        drop(handle);
        other.push(numbered(2));
        drop(other);
        let mut got = Vec::new();
        let deadline = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(b) = queue.next().await {
                got.push(b[0].fingerprint.clone());
            }
        });
        assert!(deadline.await.is_ok(), "the sink ended");
        assert_eq!(got, ["1", "2"]);
    }

    #[test]
    fn webhook_document() {
        let v = webhook_json(&[n(Status::Firing)], "http://127.0.0.1:9464/");
        assert_eq!(v["version"], "4");
        assert_eq!(v["status"], "firing");
        assert_eq!(v["alerts"][0]["startsAt"], "2027-01-15T08:00:00.000Z");
        assert_eq!(v["alerts"][0]["endsAt"], ZERO_TIME);
        assert_eq!(v["alerts"][0]["fingerprint"], "0123456789abcdef");
        assert_eq!(v["commonLabels"]["cgroup"], "/g");
        assert_eq!(v["groupLabels"]["alertname"], "MonitorGroupRefusing");
        let v = webhook_json(&[n(Status::Resolved)], "");
        assert_eq!(
            (v["status"].as_str(), v["alerts"][0]["endsAt"].as_str()),
            (Some("resolved"), Some("2027-01-15T08:01:00.000Z"))
        );
    }

    #[test]
    fn alertmanager_document() {
        let v = alertmanager_json(&[n(Status::Firing), n(Status::Resolved)], "http://x/");
        assert!(v[0].get("endsAt").is_none());
        assert_eq!(v[1]["endsAt"], "2027-01-15T08:01:00.000Z");
        assert_eq!(v[0]["labels"]["alertname"], "MonitorGroupRefusing");
    }

    #[test]
    fn command_environment_keeps_values_intact() {
        let env = command_env(&n(Status::Firing));
        let get = |k: &str| env.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("MONITOR_ALERT_STATUS"), Some("firing"));
        assert_eq!(get("MONITOR_LABEL_CGROUP"), Some("/g"));
        assert_eq!(get("MONITOR_ANNOTATION_SUMMARY"), Some("a \"quoted\"\nname; $(rm -rf /)"));
    }

    /// A webhook that answers 500 is retried with backoff (0.5 s, then 1 s) until it takes the batch, which
    /// arrives whole; the next batch goes out at once.
    #[tokio::test(flavor = "current_thread")]
    async fn webhook_answering_500_is_retried_until_it_takes_the_alert() {
        if !monitor_tests::require(
            std::path::Path::new("/usr/bin/python3").exists(),
            "webhook_answering_500_is_retried_until_it_takes_the_alert",
            "needs python3",
        ) {
            return;
        }
        // The shared webhook recorder (python's http.server): 500 to the first two POSTs, then 200.
        let hook = monitor_tests::Recorder::start(&[500, 500], 200);
        let posts = || hook.requests();
        let url: HttpUrl = hook.url("/hook").parse().expect("a webhook URL");
        let mut tasks = JoinSet::new();
        let client = crate::config::client::Client::plain().expect("the plain client").clone();
        let sink = http("webhook", url, client, "http://x/".into(), webhook_json, &mut tasks);
        let started = std::time::Instant::now();
        sink.push(vec![n(Status::Firing)]);
        while posts().len() < 3 && started.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let took = started.elapsed();
        let got = posts();
        assert_eq!(got.len(), 3, "two refusals and the delivery: {got:#?}");
        let statuses: Vec<u16> = got.iter().map(|r| r.status).collect();
        assert_eq!(statuses, [500, 500, 200]);
        assert!(got.iter().all(|r| r.method == "POST" && r.path == "/hook"), "{got:#?}");
        // Backoff: 0.5 s after the first refusal, 1 s after the second.
        assert!(took >= Duration::from_millis(1400), "retried without backing off: {took:?}");
        assert_eq!(got[2].json()["alerts"][0]["labels"]["alertname"], "MonitorGroupRefusing");
        assert_eq!(got[0].body, got[2].body, "each attempt sends the same document");
        // Reachable again: the next batch needs one POST.
        sink.push(vec![n(Status::Resolved)]);
        while posts().len() < 4 && started.elapsed() < Duration::from_secs(15) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let last = posts().into_iter().nth(3);
        assert!(last.as_ref().is_some_and(|r| r.status == 200 && r.body.contains("\"resolved\"")), "{last:?}");
    }
}
