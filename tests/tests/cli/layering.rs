//! The floors of the monitor crate (docs/design.md, "Layers"): every module of monitor/src stands on one floor, and
//! imports only from the floors its row names. The imports are read from the sources: every `crate::<module>` path
//! in code (not in comments or string literals, not in `#[cfg(test)]` modules) is an edge from the top-level module
//! that holds it to the one it names. Any edge the table does not allow fails the test, as does a module no row
//! names; and the graph must have no cycle, so that data flows one way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The top-level modules (`src/x.rs` or `src/x/`) and the modules each one's code names.
fn graph(src: &Path) -> Graph {
    let mut g = Graph::new();
    for entry in std::fs::read_dir(src).expect("reading src/") {
        let path = entry.expect("listing src/").path();
        let name = path.file_stem().and_then(|s| s.to_str()).expect("a UTF-8 file name").to_string();
        if name == "lib" || name == "main" {
            continue;
        }
        let mut files = Vec::new();
        collect(&path, &mut files);
        let mut deps = BTreeSet::new();
        for f in files {
            let text = std::fs::read_to_string(&f).expect("reading a source file");
            for code in code_lines(&text) {
                deps.extend(named(&code).filter(|d| *d != name));
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

/// The lines of a source file that are code: string literals emptied (so `"http://x"` does not hide the rest of
/// its line), comments cut, and the lines of `#[cfg(test)]` modules left out.
fn code_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_next_item = false;
    let mut test_depth: Option<i64> = None;
    for code in strip(text).lines() {
        let trimmed = code.trim();
        if let Some(depth) = test_depth.as_mut() {
            *depth += braces(code);
            if *depth <= 0 {
                test_depth = None;
            }
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            skip_next_item = true;
            continue;
        }
        if skip_next_item && !trimmed.is_empty() && !trimmed.starts_with("#[") {
            skip_next_item = false;
            let depth = braces(code);
            if trimmed.contains("mod ") && depth > 0 {
                test_depth = Some(depth);
            }
            continue;
        }
        out.push(code.to_string());
    }
    out
}

fn braces(code: &str) -> i64 {
    code.chars().map(|c| i64::from(c == '{') - i64::from(c == '}')).sum()
}

/// A source file with the contents of its string literals (plain, over several lines, raw) and char literals
/// emptied and its comments (line and block) cut; its line breaks kept.
fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let get = |j: usize| c.get(j).copied();
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '/' if get(i + 1) == Some('/') => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '/' if get(i + 1) == Some('*') => {
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && get(i + 1) == Some('*') {
                        depth += 1;
                        i += 2;
                    } else if c[i] == '*' && get(i + 1) == Some('/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if c[i] == '\n' {
                            out.push('\n');
                        }
                        i += 1;
                    }
                }
                continue;
            }
            'r' if (get(i + 1) == Some('"') || get(i + 1) == Some('#'))
                && !i.checked_sub(1).and_then(|p| c.get(p)).is_some_and(|p| p.is_alphanumeric() || *p == '_') =>
            {
                let hashes = c[i + 1..].iter().take_while(|&&h| h == '#').count();
                if c.get(i + 1 + hashes) != Some(&'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                i += 2 + hashes;
                out.push_str("\"\"");
                while i < c.len() {
                    if c[i] == '"' && c[i + 1..].iter().take(hashes).filter(|&&h| h == '#').count() == hashes {
                        i += 1 + hashes;
                        break;
                    }
                    if c[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
                continue;
            }
            '"' => {
                i += 1;
                while i < c.len() && c[i] != '"' {
                    match c[i] {
                        '\\' => i += 2,
                        '\n' => {
                            out.push('\n');
                            i += 1;
                        }
                        _ => i += 1,
                    }
                }
                i += 1;
                out.push_str("\"\"");
                continue;
            }
            // A char literal ('x', '\n', '\''); a lifetime ('a) is code.
            '\'' if get(i + 1) == Some('\\') => {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
                continue;
            }
            '\'' if get(i + 2) == Some('\'') => {
                i += 3;
                out.push_str("' '");
                continue;
            }
            ch => out.push(ch),
        }
        i += 1;
    }
    out
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

/// The floors of docs/design.md's "Layers" table: each floor's modules, and the floors it may import.
#[derive(Debug, Default)]
struct Floors {
    floor_of: BTreeMap<String, String>,
    may: BTreeMap<String, BTreeSet<String>>,
}

fn floors(design: &str) -> Floors {
    let section = design.split("\n## Layers\n").nth(1).expect("docs/design.md has a \"## Layers\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut f = Floors::default();
    for row in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() != 3 || cells[0] == "floor" || cells[0].starts_with("---") {
            continue;
        }
        let list = |s: &str| s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect::<Vec<_>>();
        for m in list(cells[1]) {
            let before = f.floor_of.insert(m.clone(), cells[0].to_string());
            assert!(before.is_none(), "the Layers table names module {m} twice");
        }
        f.may.insert(cells[0].to_string(), list(cells[2]).into_iter().collect());
    }
    assert!(f.may.len() >= 5, "read only {} floors from docs/design.md's Layers table", f.may.len());
    f
}

/// Each edge of `g` the floors do not allow, and each module no floor holds, in words.
fn outside(g: &Graph, f: &Floors) -> Vec<String> {
    let mut bad = Vec::new();
    for m in f.floor_of.keys().filter(|m| !g.contains_key(*m)) {
        bad.push(format!("the table names {m}, which monitor/src does not have"));
    }
    for (m, deps) in g {
        let Some(floor) = f.floor_of.get(m) else {
            bad.push(format!("{m} stands on no floor of the table"));
            continue;
        };
        for d in deps {
            let Some(to) = f.floor_of.get(d) else { continue };
            if !f.may.get(floor).is_some_and(|may| may.contains(to)) {
                bad.push(format!("{m} ({floor}) imports {d} ({to})"));
            }
        }
    }
    for (floor, may) in &f.may {
        for to in may.iter().filter(|to| !f.may.contains_key(*to)) {
            bad.push(format!("floor {floor} may import {to}, which is no floor"));
        }
    }
    bad
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

fn design() -> String {
    let path = monitor_tests::workspace_root().join("docs/design.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_import_is_one_the_layers_table_allows() {
    let g = graph(&src());
    assert!(g.len() > 20, "read only {} modules from {}", g.len(), src().display());
    let bad = outside(&g, &floors(&design()));
    assert!(bad.is_empty(), "imports outside docs/design.md's Layers table:\n  {}", bad.join("\n  "));
}

#[test]
fn no_consumer_imports_another() {
    let f = floors(&design());
    assert!(!f.may["consumers"].contains("consumers"), "the consumers floor may import itself");
    let consumers: Vec<&String> = f.floor_of.iter().filter(|(_, fl)| *fl == "consumers").map(|(m, _)| m).collect();
    for m in ["actions", "alerts", "api", "metrics"] {
        assert!(consumers.iter().any(|c| *c == m), "{m} is not on the consumers floor: {consumers:?}");
    }
}

#[test]
fn the_module_graph_has_no_cycle() {
    let g = graph(&src());
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
    // A URL in a string does not hide the path after it; a path in a string or a comment is no import.
    let code = |s: &str| code_lines(s).iter().flat_map(|l| named(l).collect::<Vec<_>>()).collect::<Vec<_>>();
    assert_eq!(code(r#"let u = "http://x"; crate::alerts::raise(u);"#), ["alerts"]);
    assert_eq!(code(r#"let s = "crate::api"; // crate::metrics"#), Vec::<String>::new());
    assert_eq!(code("let q = '\"'; crate::api::f();"), ["api"]);
    assert_eq!(code("let q = '\\''; let s = \"a{\\\n b\"; crate::api::f();"), ["api"]);
    assert_eq!(code("let s = r#\"a \"{ crate::metrics\"#; /* crate::alerts { */ crate::view::f();"), ["view"]);
    // Test modules are left out, and what follows them is read again.
    let text = "use crate::feed::X;\n#[cfg(test)]\nmod tests {\n    use crate::api::Y;\n    fn f() {\n    }\n}\nfn g() { crate::view::h() }\n";
    assert_eq!(code(text), ["feed", "view"]);
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycle(&g), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}

#[test]
fn a_planted_edge_outside_the_table_is_named() {
    let f = floors(&design());
    let mut g = graph(&src());
    assert!(outside(&g, &f).is_empty());
    // metrics importing api: one consumer importing another.
    g.get_mut("metrics").expect("metrics").insert("api".into());
    // the feed importing the sampler: a floor importing one above it.
    g.get_mut("feed").expect("feed").insert("sampler".into());
    g.insert("newcomer".into(), BTreeSet::new());
    let bad = outside(&g, &f);
    assert_eq!(
        bad,
        [
            "feed (feed) imports sampler (sampler)",
            "metrics (consumers) imports api (consumers)",
            "newcomer stands on no floor of the table"
        ]
    );
}
