//! The man pages and shell completions, rendered from the command line's own clap definition (`monitor
//! generate-docs DIR`, run by `cargo xtask man`), so they say what `--help` says.
//!
//! Writes `DIR/man/monitor.1`, one `DIR/man/monitor-<subcommand>.1` per visible subcommand, and
//! `DIR/completions/{monitor.bash,_monitor,monitor.fish}`. Hidden subcommands are left out of both.

use clap_complete::Shell;
use std::path::{Path, PathBuf};

/// A file or folder the docs could not be written to.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct DocsError {
    /// The file or folder.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// The command the pages and completions are for.
const NAME: &str = "monitor";

/// The shells completions are written for, and the file each one reads.
const SHELLS: [(Shell, &str); 3] =
    [(Shell::Bash, "monitor.bash"), (Shell::Zsh, "_monitor"), (Shell::Fish, "monitor.fish")];

/// Writes the man pages and completions of `cmd` under `dir`; returns the files written.
pub fn write(cmd: clap::Command, dir: &Path) -> Result<Vec<PathBuf>, DocsError> {
    // The version line of each page: the plain version (the long one spans several clauses).
    let mut cmd = visible(cmd).version(crate::sources::build::VERSION).disable_help_subcommand(true);
    cmd.build();
    let man = dir.join("man");
    let completions = dir.join("completions");
    for d in [&man, &completions] {
        std::fs::create_dir_all(d).map_err(|source| DocsError { path: d.clone(), source })?;
    }
    let mut written = Vec::new();
    let pages = std::iter::once(cmd.clone()).chain(cmd.get_subcommands().cloned());
    for page in pages {
        let page = clap_mangen::Man::new(page).source(format!("{NAME} {}", crate::sources::build::VERSION));
        let path = man.join(page.get_filename());
        let mut out = Vec::new();
        page.render(&mut out)
            .and_then(|()| std::fs::write(&path, out))
            .map_err(|source| DocsError { path: path.clone(), source })?;
        written.push(path);
    }
    for (shell, file) in SHELLS {
        let path = completions.join(file);
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut cmd, NAME, &mut out);
        std::fs::write(&path, out).map_err(|source| DocsError { path: path.clone(), source })?;
        written.push(path);
    }
    Ok(written)
}

/// `cmd` (the `monitor` command) without its hidden subcommands: the completion generators list every
/// subcommand, hidden or not.
fn visible(cmd: clap::Command) -> clap::Command {
    let mut top = clap::Command::new(NAME).args(cmd.get_arguments().cloned());
    if let Some(t) = cmd.get_about() {
        top = top.about(t.clone());
    }
    if let Some(t) = cmd.get_long_about() {
        top = top.long_about(t.clone());
    }
    if let Some(t) = cmd.get_after_help() {
        top = top.after_help(t.clone());
    }
    if let Some(t) = cmd.get_after_long_help() {
        top = top.after_long_help(t.clone());
    }
    if cmd.is_subcommand_required_set() {
        top = top.subcommand_required(true);
    }
    top.subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> clap::Command {
        clap::Command::new("monitor")
            .subcommand(clap::Command::new("agent").about("The daemon"))
            .subcommand(clap::Command::new("secret").hide(true))
    }

    #[test]
    fn hidden_subcommands_are_left_out_of_the_completions() {
        let dir = std::env::temp_dir().join(format!("monitor-docs-unit-hidden-{}", std::process::id()));
        write(command(), &dir).unwrap_or_else(|e| panic!("{e}"));
        let bash = std::fs::read_to_string(dir.join("completions/monitor.bash")).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(bash.contains("agent"), "{bash}");
        assert!(!bash.contains("secret"), "{bash}");
    }

    #[test]
    fn writes_one_page_per_visible_subcommand_and_each_completion() {
        let dir = std::env::temp_dir().join(format!("monitor-docs-unit-{}", std::process::id()));
        let written = write(command(), &dir).unwrap_or_else(|e| panic!("{e}"));
        let mut names: Vec<String> =
            written.iter().map(|p| p.strip_prefix(&dir).map(|p| p.display().to_string()).unwrap_or_default()).collect();
        names.sort();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            names,
            [
                "completions/_monitor",
                "completions/monitor.bash",
                "completions/monitor.fish",
                "man/monitor-agent.1",
                "man/monitor.1"
            ]
        );
    }
}
