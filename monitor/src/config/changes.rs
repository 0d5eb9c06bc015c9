//! What a reload changes: every key whose value differs between the running config and the one just read, each
//! either applied live or kept as running until a restart (a listening socket, the guarded cgroup, the launched
//! processes, the stats file). Pure: no I/O; the agent publishes [`Reload::config`] and logs the rest.

use super::{Config, Mode};

/// How a changed key takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    /// At once: its readers follow the applied config.
    Live,
    /// Only at the next start: the running value is kept meanwhile.
    Restart,
    /// Not read by the command running (`[proxy]` and `[[process]]` under `monitor agent`): kept, and not worth a
    /// warning.
    Ignored,
}

/// One key whose value differs (`policy.refuse_at`, `web.listen`, `process` for the `[[process]]` set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub key: &'static str,
    pub apply: Apply,
}

/// What a reload applies: the new config with every restart-only value kept as running, and the keys that changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Reload {
    pub config: Config,
    pub changes: Vec<Change>,
}

impl Reload {
    /// The changed keys applied live.
    pub fn live(&self) -> Vec<&'static str> {
        self.keys(Apply::Live)
    }

    /// The changed keys kept as running until a restart.
    pub fn restart(&self) -> Vec<&'static str> {
        self.keys(Apply::Restart)
    }

    fn keys(&self, apply: Apply) -> Vec<&'static str> {
        self.changes.iter().filter(|c| c.apply == apply).map(|c| c.key).collect()
    }
}

/// Compares each listed key; a restart-only one that differs is put back to its running value in `$merged`.
macro_rules! compare {
    ($running:ident, $new:ident, $merged:ident, $out:ident; $($key:literal => $apply:ident $($field:ident).+;)*) => {
        $(
            if $running.$($field).+ != $new.$($field).+ {
                $out.push(Change { key: $key, apply: Apply::$apply });
                if Apply::$apply == Apply::Restart {
                    $merged.$($field).+ = $running.$($field).+.clone();
                }
            }
        )*
    };
}

/// Keys only `monitor run` reads (as `monitor check-config --mode agent` names them).
fn run_only(key: &str) -> bool {
    key.starts_with("proxy.") || matches!(key, "process" | "cluster" | "group.create" | "group.limit_bytes")
}

/// The config to apply after reading `new` while `running` runs under `mode`, and what changed. The result may
/// still need [`Config::validate`]: a live value checked against a kept one (`policy.abort_at` against
/// `policy.brake_at`).
pub fn reload(running: &Config, new: &Config, mode: Mode) -> Reload {
    let mut merged = new.clone();
    let mut changes = Vec::new();
    compare! { running, new, merged, changes;
        "group.cgroup" => Restart group.cgroup;
        "group.create" => Restart group.create;
        "group.limit_bytes" => Restart group.limit_bytes;
        "policy.refuse_at" => Live policy.refuse_at;
        "policy.abort_at" => Live policy.abort_at;
        "policy.hysteresis" => Live policy.hysteresis;
        "policy.interval_ms" => Live policy.interval_ms;
        "policy.limit_bytes" => Live policy.limit_bytes;
        "policy.shadow" => Live policy.shadow;
        "policy.abort_repeat_ms" => Live policy.abort_repeat_ms;
        "policy.wakeups" => Restart policy.wakeups;
        "policy.pacing" => Restart policy.pacing;
        "policy.min_interval_ms" => Live policy.min_interval_ms;
        "policy.fill_rate_mib_s" => Live policy.fill_rate_mib_s;
        "policy.brake_at" => Restart policy.brake_at;
        "policy.kill" => Live policy.kill;
        "policy.kill_at" => Live policy.kill_at;
        "policy.kill_after_ms" => Live policy.kill_after_ms;
        "policy.kill_repeat_ms" => Live policy.kill_repeat_ms;
        "policy.recycle_after_s" => Live policy.recycle_after_s;
        "web.listen" => Restart web.listen;
        "web.external_url" => Live web.external_url;
        "web.max_connections" => Restart web.max_connections;
        "web.max_header_bytes" => Restart web.max_header_bytes;
        "stats.path" => Restart stats.path;
        "stats.retention_days" => Live stats.retention_days;
        "probes.enabled" => Live probes.enabled;
        "probes.hooks" => Live probes.hooks;
        "proxy.listen" => Restart proxy.listen;
        "proxy.tx_paths" => Restart proxy.tx_paths;
        "proxy.master_paths" => Restart proxy.master_paths;
        "proxy.admin_paths" => Restart proxy.admin_paths;
        "proxy.cache_id_header" => Restart proxy.cache_id_header;
        "proxy.master_serves_tx" => Restart proxy.master_serves_tx;
        "proxy.retry_after_s" => Restart proxy.retry_after_s;
        "proxy.upstream_timeout_s" => Restart proxy.upstream_timeout_s;
        "proxy.idle_timeout_ms" => Restart proxy.idle_timeout_ms;
        "proxy.drain_timeout_s" => Restart proxy.drain_timeout_s;
        "proxy.stop_grace_s" => Restart proxy.stop_grace_s;
        "proxy.backoff_reset_s" => Restart proxy.backoff_reset_s;
        "proxy.max_header_bytes" => Restart proxy.max_header_bytes;
        "proxy.token_secret" => Restart proxy.token_secret;
        "proxy.token_ttl_s" => Restart proxy.token_ttl_s;
        "proxy.threads" => Restart proxy.threads;
        "proxy.max_connections" => Restart proxy.max_connections;
        "proxy.header_read_timeout_s" => Restart proxy.header_read_timeout_s;
        "proxy.body_buffer_bytes" => Restart proxy.body_buffer_bytes;
        "proxy.body_buffer_total_bytes" => Restart proxy.body_buffer_total_bytes;
        "proxy.track_requests" => Restart proxy.track_requests;
        "proxy.track_query" => Restart proxy.track_query;
        "process" => Restart processes;
        "alerts.command" => Live alerts.command;
        "alerts.command_user" => Live alerts.command_user;
        "alerts.command_timeout_s" => Live alerts.command_timeout_s;
        "alerts.webhook" => Live alerts.webhook;
        "alerts.alertmanager" => Live alerts.alertmanager;
        "alerts.alertmanagers" => Live alerts.alertmanagers;
        "alerts.ca_file" => Live alerts.ca_file;
        "alerts.bearer_token_file" => Live alerts.bearer_token_file;
        "alerts.basic_auth" => Live alerts.basic_auth;
        "alerts.runbook_url" => Live alerts.runbook_url;
        "alerts.labels" => Live alerts.labels;
        "alerts.quiet_s" => Live alerts.quiet_s;
        "alerts.resend_s" => Live alerts.resend_s;
        "actions.refuse_signal" => Live actions.refuse_signal;
        "actions.abort_signal" => Live actions.abort_signal;
        "actions.serve_signal" => Live actions.serve_signal;
        "actions.recycle_signal" => Live actions.recycle_signal;
        "actions.post_url" => Live actions.post_url;
        "actions.admin_path" => Restart actions.admin_path;
        "actions.secret_file" => Live actions.secret_file;
        "cluster" => Restart cluster;
    }
    match mode {
        Mode::Agent => {
            for c in changes.iter_mut().filter(|c| run_only(c.key)) {
                c.apply = Apply::Ignored;
            }
        }
        // `monitor run` handed its processes the secret when it started them: it signs with that one until a
        // restart. (The agent reads the file again on every reload, changed or not.)
        Mode::Run => {
            for c in changes.iter_mut().filter(|c| c.key == "actions.secret_file") {
                c.apply = Apply::Restart;
                merged.actions.secret_file.clone_from(&running.actions.secret_file);
            }
        }
    }
    Reload { config: merged, changes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn cfg(text: &str) -> Config {
        match Config::from_toml(text, Path::new("m.toml")) {
            Ok(c) => c,
            Err(e) => panic!("{text:?}: {e}"),
        }
    }

    #[test]
    fn each_key_is_live_or_kept_until_a_restart() {
        // (running, new, keys applied live, keys kept until a restart)
        let cases: [(&str, &str, &[&str], &[&str]); 10] = [
            ("", "", &[], &[]),
            ("[policy]\nrefuse_at = 0.85\n", "[policy]\nrefuse_at = 0.7\n", &["policy.refuse_at"], &[]),
            (
                "",
                "[policy]\nabort_at = 0.95\nhysteresis = 0.05\nshadow = true\ninterval_ms = 200\nabort_repeat_ms = 900\n",
                &["policy.abort_at", "policy.hysteresis", "policy.interval_ms", "policy.shadow", "policy.abort_repeat_ms"],
                &[],
            ),
            ("", "[web]\nlisten = \"127.0.0.1:9999\"\n", &[], &["web.listen"]),
            ("", "[group]\ncgroup = \"/sys/fs/cgroup/x\"\n", &[], &["group.cgroup"]),
            ("", "[proxy]\nlisten = \"127.0.0.1:1\"\n[stats]\npath = \"/tmp/s.db\"\n", &[], &["stats.path", "proxy.listen"]),
            (
                "",
                "[stats]\nretention_days = 3\n[probes]\nenabled = false\n[alerts]\nlabels = { team = \"a\" }\n\
                 webhook = \"http://127.0.0.1:1/\"\n[actions]\nabort_signal = \"SIGUSR2\"\n",
                &["stats.retention_days", "probes.enabled", "alerts.webhook", "alerts.labels", "actions.abort_signal"],
                &[],
            ),
            (
                "[[process]]\nname = \"m0\"\nrole = \"master\"\ncommand = [\"x\"]\nport = 1\n",
                "[[process]]\nname = \"m0\"\nrole = \"master\"\ncommand = [\"y\"]\nport = 1\n[policy]\nrefuse_at = 0.6\n",
                &["policy.refuse_at"],
                &["process"],
            ),
            ("[actions]\nadmin_path = \"/a\"\n", "[web]\nexternal_url = \"http://h/\"\n", &["web.external_url"], &["actions.admin_path"]),
            ("", "[group]\ncreate = true\nlimit_bytes = 1000\n", &[], &["group.create", "group.limit_bytes"]),
        ];
        for (running, new, live, restart) in cases {
            let r = reload(&cfg(running), &cfg(new), Mode::Run);
            assert_eq!(r.live(), live, "{running:?} -> {new:?}");
            assert_eq!(r.restart(), restart, "{running:?} -> {new:?}");
        }
    }

    #[test]
    fn the_agent_names_no_restart_for_what_only_monitor_run_reads() {
        let running = cfg("");
        let new = cfg("[proxy]\nlisten = \"127.0.0.1:1\"\n[group]\ncreate = true\n[policy]\nrefuse_at = 0.6\n\
             [[process]]\nname = \"m0\"\nrole = \"master\"\ncommand = [\"x\"]\nport = 1\n");
        let r = reload(&running, &new, Mode::Agent);
        assert_eq!((r.live(), r.restart()), (vec!["policy.refuse_at"], vec![]));
        assert_eq!(r.changes.iter().filter(|c| c.apply == Apply::Ignored).count(), 3, "{:?}", r.changes);
        let r = reload(&running, &new, Mode::Run);
        assert_eq!(r.restart(), ["group.create", "proxy.listen", "process"]);
    }

    #[test]
    fn the_actions_secret_is_live_for_the_agent_and_kept_by_monitor_run() {
        // A secret the validation can read: 32 bytes, mode 0600.
        let dir = std::env::temp_dir().join(format!("monitor-changes-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("secret");
        crate::config::secret::write_for_test(&path, &"k".repeat(32));
        let file = path.to_str().expect("a UTF-8 temp dir");
        let new = cfg(&format!("[actions]\nsecret_file = {file:?}\n"));
        let r = reload(&cfg(""), &new, Mode::Agent);
        assert_eq!((r.live(), r.restart()), (vec!["actions.secret_file"], vec![]));
        assert_eq!(r.config.actions.secret_file.as_deref(), Some(Path::new(file)));
        let r = reload(&cfg(""), &new, Mode::Run);
        assert_eq!((r.live(), r.restart()), (vec![], vec!["actions.secret_file"]));
        assert_eq!(r.config.actions.secret_file, None, "the running value is kept");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn live_values_are_taken_and_restart_only_ones_kept() {
        let running = cfg("[web]\nlisten = \"127.0.0.1:9464\"\n[policy]\nrefuse_at = 0.85\n");
        let new = cfg("[web]\nlisten = \"127.0.0.1:9999\"\n[policy]\nrefuse_at = 0.7\n[stats]\nretention_days = 2\n");
        let r = reload(&running, &new, Mode::Run);
        assert_eq!(r.config.policy.refuse_at, 0.7);
        assert_eq!(r.config.stats.retention_days, 2);
        assert_eq!(r.config.web.listen, "127.0.0.1:9464", "the socket is the running one until a restart");
        // Applying the same file again changes nothing.
        let again = reload(&r.config, &new, Mode::Run);
        assert_eq!(again.live(), Vec::<&str>::new());
        assert_eq!(again.restart(), ["web.listen"], "still differs from the file: still named");
        assert_eq!(again.config, r.config);
    }

    #[test]
    fn a_live_value_can_clash_with_a_kept_one() {
        let running = cfg("[policy]\nabort_at = 0.9\nbrake_at = 0.95\n");
        let new = cfg("[policy]\nabort_at = 0.97\nbrake_at = 0.98\nkill_at = 0.99\n");
        let r = reload(&running, &new, Mode::Run);
        assert_eq!(r.config.policy.brake_at, Some(0.95));
        assert!(!r.config.validate().is_empty(), "abort_at 0.97 above the brake kept at 0.95 is refused");
    }
}
