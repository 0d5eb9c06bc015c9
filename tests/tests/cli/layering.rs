//! The floors of the monitor crate (docs/design.md, "Layers"): every module of monitor/src stands on one floor, and
//! imports only from the floors its row names. A floor of several modules is a folder, `src/<floor>/<module>`; a
//! floor of one module is that module. The imports are read from the sources: every `crate::<path>` in code (not
//! in comments or string literals, not in `#[cfg(test)]` modules) is an edge from the module that holds it to the
//! one it names. Any edge the table does not allow fails the test, as does a module no row names; and the graph
//! must have no cycle, so that data flows one way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The modules of `src` (as the floors place them) and the modules each one's code names.
fn graph(src: &Path, f: &Floors) -> Graph {
    let mut files = Vec::new();
    collect(src, &mut files);
    let mut g = Graph::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("a file under src/");
        let Some(name) = module_of(rel, f) else { continue };
        let text = std::fs::read_to_string(&file).expect("reading a source file");
        let mut deps = BTreeSet::new();
        for code in code_lines(&text) {
            deps.extend(named(&code, f).into_iter().filter(|d| *d != name));
        }
        g.entry(name).or_default().extend(deps);
    }
    g
}

/// The module a file of `src` belongs to: `<floor>/<module>…` on a floor folder, else its top-level module. None
/// for `lib.rs`, `main.rs` and a floor folder's `mod.rs`, which only declare modules.
fn module_of(rel: &Path, f: &Floors) -> Option<String> {
    let stem = |s: &std::ffi::OsStr| Path::new(s).file_stem().and_then(|s| s.to_str()).map(str::to_string);
    let segs: Vec<String> = rel.iter().filter_map(stem).collect();
    let top = segs.first()?.clone();
    if top == "lib" || top == "main" {
        return None;
    }
    match segs.get(1) {
        Some(m) if f.holds(&top, m) => Some(m.clone()),
        Some(m) if m == "mod" && segs.len() == 2 && f.is_folder(&top) => None,
        _ => Some(top),
    }
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

/// The modules a line of code names: `crate::x`, `crate::<floor>::x`, and each of them in a group
/// (`use crate::{x, <floor>::{y, z}}`).
fn named(code: &str, f: &Floors) -> Vec<String> {
    let mut out = Vec::new();
    for (i, m) in code.match_indices("crate::") {
        for (head, next) in heads(&code[i + m.len()..]) {
            if !head.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                continue;
            }
            // `<floor>::<module>` names the module; anything else under a module is the module itself.
            let (held, own): (Vec<String>, Vec<String>) = next.into_iter().partition(|n| f.holds(&head, n));
            if own.len() + held.len() == 0 || !own.is_empty() {
                out.push(head);
            }
            out.extend(held);
        }
    }
    out
}

/// The first segments of the paths that `rest` (what follows `crate::`) starts, each with the segments that follow
/// it: `a::b` gives (a, [b]); `{a, b::{c, d}}` gives (a, []) and (b, [c, d]).
fn heads(rest: &str) -> Vec<(String, Vec<String>)> {
    let level = |s: &str| -> Vec<String> {
        match s.strip_prefix('{') {
            Some(group) => group_items(group),
            None => vec![s.to_string()],
        }
    };
    level(rest.trim_start())
        .into_iter()
        .map(|item| {
            let head = ident(item.trim());
            let after = item.trim()[head.len()..].trim_start();
            let next = match after.strip_prefix("::") {
                Some(n) => level(n.trim_start()).iter().map(|x| ident(x.trim())).collect(),
                None => Vec::new(),
            };
            (head, next)
        })
        .collect()
}

/// The items of a group, `group` being what follows its `{`: split at its commas outside nested braces, up to its
/// closing brace.
fn group_items(group: &str) -> Vec<String> {
    let mut depth = 0;
    let mut parts = vec![String::new()];
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(p) = parts.last_mut() {
            p.push(c);
        }
    }
    parts
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

impl Floors {
    /// Whether `floor` is a folder: it holds several modules.
    fn is_folder(&self, floor: &str) -> bool {
        self.floor_of.values().filter(|f| *f == floor).count() > 1
    }

    /// Whether `module` lives in the folder of `floor`.
    fn holds(&self, floor: &str, module: &str) -> bool {
        module != floor && self.floor_of.get(module).is_some_and(|f| f == floor)
    }
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
    let g = graph(&src(), &floors(&design()));
    assert!(g.len() > 20, "read only {} modules from {}", g.len(), src().display());
    let bad = outside(&g, &floors(&design()));
    assert!(bad.is_empty(), "imports outside docs/design.md's Layers table:\n  {}", bad.join("\n  "));
}

#[test]
fn a_floor_of_several_modules_is_a_folder_that_holds_them() {
    let f = floors(&design());
    let src = src();
    let mut misplaced = Vec::new();
    for (m, floor) in f.floor_of.iter().filter(|(m, fl)| f.is_folder(fl) && *m != *fl) {
        let dir = src.join(floor);
        if !dir.join(format!("{m}.rs")).is_file() && !dir.join(m).is_dir() {
            misplaced.push(format!("{m} is not in src/{floor}/"));
        }
    }
    for e in std::fs::read_dir(&src).expect("listing src/") {
        let name = e.expect("listing src/").path().file_stem().and_then(|s| s.to_str()).map(str::to_string);
        let name = name.expect("a UTF-8 file name");
        if !["lib", "main"].contains(&name.as_str()) && !f.may.contains_key(&name) && !f.floor_of.contains_key(&name) {
            misplaced.push(format!("src/{name} is neither a floor nor a module of the table"));
        }
    }
    assert!(misplaced.is_empty(), "{}", misplaced.join("\n"));
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
    let g = graph(&src(), &floors(&design()));
    if let Some(c) = cycle(&g) {
        panic!("the modules import each other in a circle: {}", c.join(" -> "));
    }
}

#[test]
fn the_feed_depends_only_on_the_snapshot_the_policy_and_the_config_values() {
    let g = graph(&src(), &floors(&design()));
    let allowed: BTreeSet<String> = ["snapshot", "policy", "config"].map(String::from).into();
    assert!(g["feed"].is_subset(&allowed), "feed imports {:?}", g["feed"]);
    assert!(g["snapshot"].is_empty(), "snapshot imports {:?}", g["snapshot"]);
    let policy: BTreeSet<String> = ["snapshot"].map(String::from).into();
    assert!(g["policy"].is_subset(&policy), "policy imports {:?}", g["policy"]);
}

#[test]
fn the_reader_sees_every_form_of_import() {
    let f = floors(&design());
    let names = |s: &str| named(s, &f);
    assert_eq!(names("use crate::feed::{Published, Samples};"), ["feed"]);
    assert_eq!(
        names("use crate::{consumers::api, history::{ring, store}, decision::policy::State};"),
        ["api", "history", "policy"]
    );
    assert_eq!(names("use crate::consumers::{actions, alerts::Raiser};"), ["actions", "alerts"]);
    assert_eq!(
        names("use crate::{base::{token, units}, config::{live::Live, Config}};"),
        ["token", "units", "config", "live"]
    );
    assert_eq!(
        names("    let x = crate::sources::procs::start_ticks(pid) + crate::cluster::wire::f();"),
        ["procs", "cluster"]
    );
    assert_eq!(names("use crate::Foo;"), Vec::<String>::new());
    // A URL in a string does not hide the path after it; a path in a string or a comment is no import.
    let code = |s: &str| code_lines(s).iter().flat_map(|l| named(l, &f)).collect::<Vec<_>>();
    assert_eq!(code(r#"let u = "http://x"; crate::consumers::alerts::raise(u);"#), ["alerts"]);
    assert_eq!(code(r#"let s = "crate::view"; // crate::sampler"#), Vec::<String>::new());
    assert_eq!(code("let q = '\"'; crate::view::f();"), ["view"]);
    assert_eq!(code("let q = '\\''; let s = \"a{\\\n b\"; crate::view::f();"), ["view"]);
    assert_eq!(code("let s = r#\"a \"{ crate::sampler\"#; /* crate::feed { */ crate::view::f();"), ["view"]);
    // Test modules are left out, and what follows them is read again.
    let text = "use crate::feed::X;\n#[cfg(test)]\nmod tests {\n    use crate::sampler::Y;\n    fn f() {\n    }\n}\nfn g() { crate::view::h() }\n";
    assert_eq!(code(text), ["feed", "view"]);
    // Files are read as the module their folder places them in.
    let of = |p: &str| module_of(Path::new(p), &f);
    assert_eq!(of("consumers/metrics/render.rs").as_deref(), Some("metrics"));
    assert_eq!(of("consumers/mod.rs"), None);
    assert_eq!(of("config/live.rs").as_deref(), Some("live"));
    assert_eq!(of("config/check.rs").as_deref(), Some("config"));
    assert_eq!(of("cluster/wire.rs").as_deref(), Some("cluster"));
    assert_eq!(of("sampler.rs").as_deref(), Some("sampler"));
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
    let mut g = graph(&src(), &f);
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
