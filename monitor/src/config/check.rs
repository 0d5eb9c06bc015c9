//! `monitor check-config`: a file checked for the command that will read it. A parse error stops at the first
//! (the TOML parser's); after a good parse every problem is reported, each at its key and line, and so is what the
//! command itself would refuse (`monitor run` with no `[[process]]`).

use super::position::Positions;
use super::validate::KeyPart::{Index, Key};
use super::{read, Config, ConfigError};
use std::path::Path;

/// The command a config is checked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `monitor agent --config FILE`: watches a group; `[[process]]` and `[proxy]` are not read.
    Agent,
    /// `monitor run --config FILE`: starts the `[[process]]` tables behind the front door.
    Run,
}

impl Mode {
    /// The command a config is written for when none is named: `run` when it lists a `[[process]]`.
    pub fn of(cfg: &Config) -> Mode {
        if cfg.processes.is_empty() {
            Mode::Agent
        } else {
            Mode::Run
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Agent => "agent",
            Mode::Run => "run",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "agent" => Ok(Mode::Agent),
            "run" => Ok(Mode::Run),
            _ => Err(format!("{s:?} is neither \"agent\" nor \"run\"")),
        }
    }
}

/// A config that passed, the command it was checked for, and what that command will not read.
#[derive(Debug)]
pub struct Checked {
    pub config: Config,
    pub mode: Mode,
    /// Keys in the file that the command ignores, in file order, each with its line (`m.toml:9: process: …`).
    pub warnings: Vec<String>,
}

/// Reads `path` and checks it for `mode` (by default [`Mode::of`] the config): every problem, or the config.
pub fn check(path: &Path, mode: Option<Mode>) -> Result<Checked, Vec<ConfigError>> {
    let text = read(path).map_err(|e| vec![e])?;
    let config = Config::parse(&text, path).map_err(|e| vec![e])?;
    let mut errors = config.problems(&text, path);
    let mode = mode.unwrap_or_else(|| Mode::of(&config));
    let mut warnings = Vec::new();
    match mode {
        Mode::Run if config.processes.is_empty() => errors.push(ConfigError::Mode {
            path: path.to_path_buf(),
            msg: "no [[process]] to run (monitor run starts the processes its config lists)".into(),
        }),
        Mode::Run => {}
        Mode::Agent => {
            let at = Positions::new(&text);
            let ignored = [
                (&[Key("process"), Index(0)][..], "process", "[[process]] is started only by monitor run"),
                (&[Key("proxy")][..], "proxy", "the front door is monitor run's"),
                (&[Key("cluster")][..], "cluster", "a cluster is of monitor run's front doors"),
                (&[Key("group"), Key("create")][..], "group.create", "only monitor run creates the group"),
                (&[Key("group"), Key("limit_bytes")][..], "group.limit_bytes", "only monitor run sets the limit"),
            ];
            let mut found: Vec<(usize, &str, &str)> =
                ignored.into_iter().filter_map(|(key, name, why)| Some((at.locate(key)?, name, why))).collect();
            found.sort_unstable();
            for (line, name, why) in found {
                warnings.push(format!("{}:{line}: {name}: ignored by monitor agent: {why}", path.display()));
            }
            if config.actions.posts_unsigned() {
                let line = at.locate(&[Key("actions")]).unwrap_or(0);
                warnings.push(format!(
                    "{}:{line}: actions: the action POSTs go unsigned: without secret_file a process cannot tell \
                     them from forged ones",
                    path.display()
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(Checked { config, mode, warnings })
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config file in a directory of its own, removed on drop.
    struct File(std::path::PathBuf);

    impl File {
        fn new(name: &str, text: &str) -> File {
            let dir = std::env::temp_dir().join(format!("monitor-check-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let path = dir.join("m.toml");
            std::fs::write(&path, text).expect("write");
            File(path)
        }
    }

    impl Drop for File {
        fn drop(&mut self) {
            if let Some(dir) = self.0.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    fn problems(name: &str, text: &str, mode: Option<Mode>) -> Vec<String> {
        let f = File::new(name, text);
        match check(&f.0, mode) {
            Ok(c) => panic!("accepted: {c:?}"),
            Err(e) => e.iter().map(|e| e.to_string().replace(&f.0.display().to_string(), "m.toml")).collect(),
        }
    }

    const RUN: &str = "[[process]]\nname = \"m0\"\nrole = \"master\"\ncommand = [\"x\"]\nport = 3001\n";

    #[test]
    fn every_problem_is_listed_with_its_key_and_line() {
        let text = "[policy]\nabort_at = 1.5\ninterval_ms = 5\n[stats]\nretention_days = 0\n\
                    [[process]]\nname = \"m0\"\nrole = \"worker\"\ncommand = []\nport = 3001\n";
        let got = problems("many", text, None);
        let want = [
            "m.toml:2: policy.abort_at:",
            "m.toml:3: policy.interval_ms:",
            "m.toml:5: stats.retention_days:",
            "m.toml:9: process[0].command:",
            "m.toml:6: process: needs exactly one master, has 0",
        ];
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for (g, w) in got.iter().zip(want) {
            assert!(g.starts_with(w), "got {g:?}, want {w:?}");
        }
    }

    #[test]
    fn an_https_webhook_is_checked_with_the_files_it_needs() {
        let f = File::new("https", "[alerts]\nwebhook = \"https://hooks.example/monitor\"\n");
        assert!(check(&f.0, None).is_ok(), "an https webhook is accepted");
        let got = problems(
            "https-ca",
            "[alerts]\nwebhook = \"https://hooks.example/monitor\"\nca_file = \"/nonexistent/ca.pem\"\n",
            None,
        );
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("m.toml:3: alerts.ca_file: /nonexistent/ca.pem:"), "{got:?}");
    }

    #[test]
    fn a_parse_error_is_the_only_problem() {
        let got = problems("parse", "[policy]\nrefuse_at = 1.5\n[actions]\nabort_signal = \"SIGSEGV\"\n", None);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("m.toml:4: actions.abort_signal:"), "{got:?}");
    }

    #[test]
    fn the_mode_follows_the_sections_unless_named() {
        let f = File::new("mode-run", RUN);
        let c = check(&f.0, None).expect("a run config");
        assert_eq!((c.mode, c.warnings.len()), (Mode::Run, 0));
        let f = File::new("mode-agent", "[policy]\nshadow = true\n");
        let c = check(&f.0, None).expect("an agent config");
        assert_eq!((c.mode, c.warnings.len()), (Mode::Agent, 0));
        assert_eq!(c.config.processes.len(), 0);
    }

    #[test]
    fn run_needs_a_process() {
        let got = problems("run-empty", "[proxy]\nlisten = \"127.0.0.1:8080\"\n", Some(Mode::Run));
        assert_eq!(got, ["m.toml: no [[process]] to run (monitor run starts the processes its config lists)"]);
        // With other problems, all of them.
        let got = problems("run-empty-bad", "[stats]\nretention_days = 0\n", Some(Mode::Run));
        assert_eq!(got.len(), 2, "{got:?}");
    }

    #[test]
    fn agent_warns_that_it_ignores_the_cluster_and_run_checks_it() {
        let cluster = "[proxy]\nlisten = \"127.0.0.2:8080\"\n[cluster]\nlisten = \"127.0.0.2:7946\"\n\
                       secret = \"0123456789abcdef0123456789abcdef\"\n";
        let f = File::new("agent-ignores-cluster", cluster);
        let c = check(&f.0, Some(Mode::Agent)).expect("accepted with warnings");
        let w: Vec<String> = c.warnings.iter().map(|w| w.replace(&f.0.display().to_string(), "m.toml")).collect();
        assert_eq!(w.len(), 2, "{w:#?}");
        assert!(w[1].starts_with("m.toml:3: cluster: ignored by monitor agent"), "{w:?}");
        let text = format!("{RUN}{}", cluster.replace("0123456789abcdef0123456789abcdef", "short"));
        let got = problems("run-cluster-short", &text, Some(Mode::Run));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("m.toml:10: cluster.secret: is 5 bytes"), "{got:?}");
    }

    #[test]
    fn agent_warns_about_what_it_ignores() {
        let text = format!("[group]\ncreate = true\n[proxy]\nlisten = \"127.0.0.1:8080\"\n{RUN}");
        let f = File::new("agent-ignores", &text);
        let c = check(&f.0, Some(Mode::Agent)).expect("accepted with warnings");
        let shown = f.0.display().to_string();
        let w: Vec<String> = c.warnings.iter().map(|w| w.replace(&shown, "m.toml")).collect();
        assert_eq!(w.len(), 3, "{w:#?}");
        assert!(w[0].starts_with("m.toml:2: group.create: ignored by monitor agent"), "{w:?}");
        assert!(w[1].starts_with("m.toml:3: proxy: ignored by monitor agent"), "{w:?}");
        assert!(w[2].starts_with("m.toml:5: process: ignored by monitor agent"), "{w:?}");
    }

    #[test]
    fn the_actions_secret_is_checked_and_an_unsigned_agent_named() {
        let dir = std::env::temp_dir().join(format!("monitor-check-{}-action-secret", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (long, short) = (dir.join("long"), dir.join("short"));
        crate::config::secret::write_for_test(&long, &format!("{}\n", "k".repeat(32)));
        crate::config::secret::write_for_test(&short, &format!("{}\n", "k".repeat(31)));
        let actions = |file: &std::path::Path| format!("[actions]\nadmin_path = \"/a\"\nsecret_file = {:?}\n", file);
        // Signed: no warning, in either mode.
        let f = File::new("secret-long", &actions(&long));
        let c = check(&f.0, None).expect("a 32-byte secret");
        assert_eq!((c.mode, c.warnings.len()), (Mode::Agent, 0), "{:?}", c.warnings);
        assert_eq!(c.config.actions.secret(), Ok(Some(vec![b'k'; 32])), "the newline is not part of it");
        let got = problems("secret-short", &actions(&short), None);
        assert!(got[0].starts_with("m.toml:3: actions.secret_file: is 31 bytes, must be at least 32"), "{got:?}");
        let got = problems("secret-missing", &actions(&dir.join("missing")), None);
        assert!(got[0].starts_with("m.toml:3: actions.secret_file:") && got[0].contains("missing"), "{got:?}");
        // One others can read: named with its mode and the fix.
        let open = dir.join("open");
        std::fs::write(&open, format!("{}\n", "k".repeat(32))).expect("write");
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644)).expect("chmod");
        let got = problems("secret-open", &actions(&open), None);
        let o = open.display();
        let want = format!("m.toml:3: actions.secret_file: {o} is mode 0644 (readable by others): run chmod 600 {o}");
        assert_eq!(got, [want]);
        // The agent's POSTs without a secret: accepted, and named.
        let f = File::new("unsigned", "[policy]\nshadow = true\n\n[actions]\npost_url = \"http://127.0.0.1:1/m\"\n");
        let c = check(&f.0, None).expect("unsigned is allowed");
        let w: Vec<String> = c.warnings.iter().map(|w| w.replace(&f.0.display().to_string(), "m.toml")).collect();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("m.toml:4: actions: the action POSTs go unsigned"), "{w:?}");
        // monitor run makes a secret of its own; its processes may not be handed another.
        let f = File::new("run-unsigned", &format!("{RUN}admin_path = \"/a\"\n"));
        assert_eq!(check(&f.0, None).expect("a run config").warnings.len(), 0);
        let got = problems("run-env", &format!("{RUN}env = {{ MONITOR_ACTION_SECRET = \"00\" }}\n"), None);
        assert!(got[0].starts_with("m.toml:6: process[0].env: MONITOR_ACTION_SECRET is monitor's to set"), "{got:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn modes_by_name() {
        assert_eq!("agent".parse::<Mode>(), Ok(Mode::Agent));
        assert_eq!("run".parse::<Mode>(), Ok(Mode::Run));
        assert!("both".parse::<Mode>().is_err());
    }

    #[test]
    fn a_missing_file_is_one_problem() {
        let e = check(Path::new("/does/not/exist.toml"), None).expect_err("missing");
        assert_eq!(e.len(), 1);
        assert!(e[0].to_string().starts_with("/does/not/exist.toml:"), "{e:?}");
    }
}
