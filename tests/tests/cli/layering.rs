//! The module graph of the monitor crate, read from its sources (monitor/src): every `crate::<module>` path outside comments is an edge
//! from the top-level module that holds it to the one it names. The graph must have no cycle, so that data flows
//! one way (cgroup files and /proc -> sampler -> feed -> consumers -> agent), and the feed, which every consumer
//! reads, must depend on nothing but the snapshot, the policy and the config's typed values.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The top-level modules (`src/x.rs` or `src/x/`) and the modules each one's code names.
fn graph(src: &Path) -> Graph {
    let mut g = Graph::new();
    for entry in std::fs::read_dir(src).expect("reading src/") {
        let path = entry.expect("listing src/").path();
        let name = path.file_stem().and_then(|s| s.to_str()).expect("a UTF-8 file name").to_string();
        if name == "lib" || name == "main" || name == "layering" {
            continue;
        }
        let mut files = Vec::new();
        collect(&path, &mut files);
        let mut deps = BTreeSet::new();
        for f in files {
            let text = std::fs::read_to_string(&f).expect("reading a source file");
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or("");
                deps.extend(named(code).filter(|d| *d != name));
            }
        }
        g.entry(name).or_default().extend(deps);
    }
    g
}

fn collect(path: &Path, out: &mut Vec<std::path::PathBuf>) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).expect("listing a module folder") {
            collect(&e.expect("listing a module folder").path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// The modules a line of code names: `crate::x`, and each `x` in `use crate::{x, y::z}`.
fn named(code: &str) -> impl Iterator<Item = String> + '_ {
    code.match_indices("crate::").flat_map(move |(i, m)| {
        let rest = &code[i + m.len()..];
        let heads: Vec<String> = if let Some(group) = rest.strip_prefix('{') {
            // Only the first level of a group names modules: split at commas outside nested braces.
            let mut depth = 0;
            let mut parts = vec![String::new()];
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => parts.push(String::new()),
                    _ => {}
                }
                if let Some(p) = parts.last_mut() {
                    if depth == 0 && c != ',' && c != '}' && c != '{' {
                        p.push(c);
                    }
                }
            }
            parts.into_iter().map(|p| ident(p.trim())).collect()
        } else {
            vec![ident(rest)]
        };
        heads.into_iter().filter(|h| !h.is_empty() && h.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
    })
}

fn ident(s: &str) -> String {
    s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

/// A cycle in `g`, as the path of modules around it, if there is one.
fn cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(n: &str, g: &Graph, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == n) {
            let mut c = path[at..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for d in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys().find_map(|n| visit(n, g, &mut Vec::new(), &mut done))
}

fn src() -> std::path::PathBuf {
    monitor_tests::workspace_root().join("monitor/src")
}

#[test]
fn the_module_graph_has_no_cycle() {
    let g = graph(&src());
    assert!(g.len() > 20, "read only {} modules from {}", g.len(), src().display());
    if let Some(c) = cycle(&g) {
        panic!("the modules import each other in a circle: {}", c.join(" -> "));
    }
}

#[test]
fn the_feed_depends_only_on_the_snapshot_the_policy_and_the_config_values() {
    let g = graph(&src());
    let allowed: BTreeSet<String> = ["snapshot", "policy", "config"].map(String::from).into();
    assert!(g["feed"].is_subset(&allowed), "feed imports {:?}", g["feed"]);
    assert!(g["snapshot"].is_empty(), "snapshot imports {:?}", g["snapshot"]);
    let policy: BTreeSet<String> = ["snapshot"].map(String::from).into();
    assert!(g["policy"].is_subset(&policy), "policy imports {:?}", g["policy"]);
}

#[test]
fn the_reader_sees_every_form_of_import() {
    let names = |s: &str| named(s).collect::<Vec<_>>();
    assert_eq!(names("use crate::feed::{Published, Samples};"), ["feed"]);
    assert_eq!(names("use crate::{api, history::{ring, store}, policy::State};"), ["api", "history", "policy"]);
    assert_eq!(names("    let x = crate::procs::start_ticks(pid) + crate::cgroup::f();"), ["procs", "cgroup"]);
    assert_eq!(names("use crate::Foo;"), Vec::<String>::new());
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycle(&g), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}
