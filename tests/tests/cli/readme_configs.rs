//! The README's config examples are real: each ```toml block passes `monitor check-config`.

use monitor_tests::{run_monitor, workspace_root};
use std::time::Duration;

#[test]
fn readme_config_examples_pass_check_config() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap_or_else(|e| panic!("README: {e}"));
    let mut blocks = Vec::new();
    let mut rest = readme.as_str();
    while let Some(start) = rest.find("```toml\n") {
        let body = &rest[start + 8..];
        let end = body.find("```").unwrap_or_else(|| panic!("unterminated toml block in the README"));
        blocks.push(body[..end].to_string());
        rest = &body[end..];
    }
    assert!(!blocks.is_empty(), "the README shows a config");
    let dir = std::env::temp_dir().join(format!("monitor-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    for (i, b) in blocks.iter().enumerate() {
        let path = dir.join(format!("readme-{i}.toml"));
        std::fs::write(&path, b).unwrap_or_else(|e| panic!("{e}"));
        let out = run_monitor(&["check-config", &path.display().to_string()], Duration::from_secs(10));
        assert!(out.status.success(), "README toml block {i} does not pass check-config: {}\n{b}", out.stderr);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
