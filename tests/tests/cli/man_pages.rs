//! The man pages and completions `monitor generate-docs DIR` writes (what `cargo xtask man` and the package ship):
//! a page per subcommand that `--help` lists, the top page naming each of them and `MONITOR_LOG`, completion files
//! for bash, zsh and fish that name the subcommands (bash's accepted by `bash -n`), and the hidden command itself
//! in none of them.

use monitor_tests::{run_monitor, temp_dir};
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(20);

/// The subcommands docs/operations.md lists, each of which must have its page.
const CONTRACT: [&str; 5] = ["agent", "run", "status", "report", "check-config"];

/// The subcommands `monitor --help` lists (the lines under `Commands:`, `help` aside).
fn listed_subcommands() -> Vec<String> {
    let out = run_monitor(&["--help"], LIMIT);
    assert!(out.status.success(), "monitor --help: {out:?}");
    out.stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// roff escapes `-` as `\-`; the text as a reader sees it.
fn plain(roff: &str) -> String {
    roff.replace("\\-", "-")
}

#[test]
fn generate_docs_writes_a_page_per_subcommand_and_completions_bash_accepts() {
    let dir = temp_dir("generate-docs");
    let out = run_monitor(&["generate-docs", &dir.display().to_string()], LIMIT);
    assert!(out.status.success(), "generate-docs: {out:?}");

    let subcommands = listed_subcommands();
    for c in CONTRACT {
        assert!(subcommands.iter().any(|s| s == c), "--help does not list {c}: {subcommands:?}");
    }
    let top = plain(&read(&dir.join("man/monitor.1")));
    assert!(top.contains("MONITOR_LOG"), "monitor.1 does not name MONITOR_LOG:\n{top}");
    for c in &subcommands {
        assert!(top.contains(&format!("monitor-{c}")), "monitor.1 does not name monitor-{c}:\n{top}");
        let page = plain(&read(&dir.join(format!("man/monitor-{c}.1"))));
        assert!(page.contains(&format!(".TH monitor-{c} 1")), "monitor-{c}.1 has no title line:\n{page}");
    }
    let pages = std::fs::read_dir(dir.join("man")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(pages, subcommands.len() + 1, "one page per subcommand plus monitor.1");

    for file in ["monitor.bash", "_monitor", "monitor.fish"] {
        let text = read(&dir.join("completions").join(file));
        for c in &subcommands {
            assert!(text.contains(c.as_str()), "{file} does not complete {c}");
        }
        assert!(!text.contains("generate-docs"), "{file} offers the hidden generate-docs");
    }
    assert!(!top.contains("generate-docs"), "monitor.1 names the hidden generate-docs");

    let bash = dir.join("completions/monitor.bash");
    let checked =
        std::process::Command::new("bash").arg("-n").arg(&bash).output().unwrap_or_else(|e| panic!("bash -n: {e}"));
    assert!(checked.status.success(), "bash -n {}: {}", bash.display(), String::from_utf8_lossy(&checked.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}
