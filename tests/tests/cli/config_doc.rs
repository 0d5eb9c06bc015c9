//! docs/configuration.md against the config monitor accepts, both ways: every key the config takes is on the page,
//! every key on the page is taken, and each documented default is the real one.
//!
//! Nothing here lists the keys a second time. The accepted keys are serde's own field lists, read from the error
//! an unknown key gets (`unknown field `…`, expected one of …`), table by table down from the top. A documented
//! default is checked by parsing it: the table with the key set to that value must equal the table without it.
//! `none` (unset) is checked on the parsed value's `Debug`, and `required` by the error its absence gets.

use monitor::config::Config;
use monitor_tests::workspace_root;
use std::collections::BTreeMap;
use std::path::Path;

/// What the page says of a key's default.
#[derive(Debug, Clone, PartialEq)]
enum Documented {
    /// A TOML value, written in backticks: `0.85`, `"auto"`, `["^/"]`.
    Value(String),
    /// `required`: the table does not parse without it.
    Required,
    /// `none`: unset unless given.
    None,
}

/// One row of a key table: the key's dotted path (`policy.refuse_at`, `alerts.basic_auth.username`), its default,
/// and the page's line.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    key: String,
    default: Documented,
    line: usize,
}

/// The header a key table starts with.
const HEADER: &str = "| key | default | what it does |";

/// The cells of a table row, split at `|` but not at `\|` (a pipe inside a cell), each trimmed and unescaped.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = Vec::new();
    let mut cell = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                cell.push('|');
            }
            '|' => out.push(std::mem::take(&mut cell)),
            c => cell.push(c),
        }
    }
    out.push(cell);
    out.iter().map(|s| s.trim().to_string()).collect()
}

/// The text inside one pair of backticks, when that is the whole cell.
fn code(cell: &str) -> Option<&str> {
    cell.strip_prefix('`')?.strip_suffix('`').filter(|s| !s.contains('`'))
}

/// The page's tables (`## [section]` headings, `[[section]]` for arrays) and the rows of each key table under
/// them. Panics on a row it cannot read, naming its line.
fn page_rows(page: &str) -> (Vec<String>, Vec<Row>) {
    let mut sections = Vec::new();
    let mut rows = Vec::new();
    let mut section: Option<String> = None;
    let mut in_table = false;
    for (n, line) in page.lines().enumerate() {
        let line_no = n + 1;
        if let Some(h) = line.strip_prefix("## ") {
            in_table = false;
            let h = h.trim();
            section = h.starts_with('[').then(|| h.trim_start_matches('[').trim_end_matches(']').to_string());
            sections.extend(section.clone());
            continue;
        }
        if line.trim() == HEADER {
            in_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        if !in_table || line.starts_with("| ---") {
            continue;
        }
        let Some(section) = &section else { panic!("configuration.md:{line_no}: a key table outside a ## [table]") };
        let c = cells(line);
        assert_eq!(c.len(), 3, "configuration.md:{line_no}: a key row has three cells: {line}");
        let key = code(&c[0]).unwrap_or_else(|| panic!("configuration.md:{line_no}: the key in backticks: {line}"));
        let default = match (c[1].as_str(), code(&c[1])) {
            ("required", _) => Documented::Required,
            ("none", _) => Documented::None,
            (_, Some(v)) => Documented::Value(v.to_string()),
            (other, None) => {
                panic!("configuration.md:{line_no}: a default is `value`, required or none, not {other:?}")
            }
        };
        assert!(!c[2].is_empty(), "configuration.md:{line_no}: {key} says what it does");
        rows.push(Row { key: format!("{section}.{key}"), default, line: line_no });
    }
    (sections, rows)
}

/// How a table sits in the file: a table (`[x]`, `x = { … }`) or an array of tables (`[[x]]`, `x = [{ … }]`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    Table,
    Array,
}

/// TOML text with `entries` (`key = value`) inside the table at `path`, nested inline from the top.
fn nested(path: &[(String, Shape)], entries: &[String]) -> String {
    let Some(((last, shape), above)) = path.split_last() else { return entries.join("\n") };
    let inner = format!("{{ {} }}", entries.join(", "));
    let value = match shape {
        Shape::Table => inner,
        Shape::Array => format!("[{inner}]"),
    };
    nested(above, &[format!("{last} = {value}")])
}

/// The error `text` gets from the config parser, if any.
fn parse(text: &str) -> Result<Config, String> {
    Config::parse(text, Path::new("doc.toml")).map_err(|e| e.to_string())
}

/// The names serde lists for the table at `path`, from the error an unknown key there gets; `None` when `path`
/// is not a table of that shape (a plain value, a map of any keys).
fn fields(path: &[(String, Shape)]) -> Option<Vec<String>> {
    let err = parse(&nested(path, &["zz_not_a_key = 0".to_string()])).err()?;
    let listed = err.split("unknown field `zz_not_a_key`, ").nth(1)?;
    if listed.starts_with("there are no fields") {
        return Some(Vec::new());
    }
    let listed = listed.split(';').next().unwrap_or(listed);
    Some(listed.split('`').skip(1).step_by(2).map(String::from).collect())
}

/// Every table and key the config accepts, by dotted path, with the shape of each table.
fn accepted() -> BTreeMap<String, Option<Shape>> {
    fn walk(path: &mut Vec<(String, Shape)>, out: &mut BTreeMap<String, Option<Shape>>) {
        let names = fields(path).unwrap_or_else(|| panic!("no field list at {path:?}"));
        assert!(!names.is_empty() || !path.is_empty(), "read no top-level tables");
        for name in names {
            let dotted: Vec<&str> = path.iter().map(|(k, _)| k.as_str()).chain([name.as_str()]).collect();
            let dotted = dotted.join(".");
            let mut shape = None;
            for s in [Shape::Table, Shape::Array] {
                path.push((name.clone(), s));
                let table = path.len() < 5 && fields(path).is_some();
                if table {
                    walk(path, out);
                }
                path.pop();
                if table {
                    shape = Some(s);
                    break;
                }
            }
            out.insert(dotted, shape);
        }
    }
    let mut out = BTreeMap::new();
    walk(&mut Vec::new(), &mut out);
    out
}

/// The sample value of each required key, for building a table that parses.
fn sample(key: &str) -> &'static str {
    match key {
        "process.name" => "\"m0\"",
        "process.role" => "\"master\"",
        "process.command" => "[\"x\"]",
        "process.port" => "1",
        "alerts.basic_auth.username" => "\"u\"",
        "alerts.basic_auth.password_file" => "\"/p\"",
        other => panic!("{other} is required: give it a sample value in config_doc.rs's sample()"),
    }
}

/// Builds config texts for the rows' checks: each table with its required keys (sample values) and ancestors.
struct Texts<'a> {
    shapes: &'a BTreeMap<String, Option<Shape>>,
    rows: &'a [Row],
}

impl Texts<'_> {
    /// The text of the table holding `key` with its other required keys, and `key = set` unless `set` is None.
    fn around(&self, key: &str, set: Option<&str>) -> String {
        let parts: Vec<&str> = key.split('.').collect();
        let (leaf, table) = parts.split_last().unwrap_or_else(|| panic!("empty key"));
        let mut entries = Vec::new();
        let mut path = Vec::new();
        for (i, part) in table.iter().enumerate() {
            let dotted = table[..=i].join(".");
            let shape = self.shapes.get(&dotted).copied().flatten().unwrap_or_else(|| panic!("{dotted} is no table"));
            path.push((part.to_string(), shape));
        }
        let prefix = format!("{}.", table.join("."));
        for r in self.rows.iter().filter(|r| r.default == Documented::Required) {
            let Some(name) = r.key.strip_prefix(&prefix).filter(|n| !n.contains('.')) else { continue };
            if name != *leaf {
                entries.push(format!("{name} = {}", sample(&r.key)));
            }
        }
        if let Some(value) = set {
            entries.push(format!("{leaf} = {value}"));
        }
        nested(&path, &entries)
    }
}

/// The `Debug` of the struct of the table `section` in `c`.
fn section_debug(c: &Config, section: &str) -> String {
    match section {
        "group" => format!("{:#?}", c.group),
        "policy" => format!("{:#?}", c.policy),
        "web" => format!("{:#?}", c.web),
        "stats" => format!("{:#?}", c.stats),
        "probes" => format!("{:#?}", c.probes),
        "proxy" => format!("{:#?}", c.proxy),
        "process" => format!("{:#?}", c.processes.first().unwrap_or_else(|| panic!("the sample [[process]]"))),
        "alerts" => format!("{:#?}", c.alerts),
        "actions" => format!("{:#?}", c.actions),
        "cluster" => format!("{:#?}", c.cluster.as_ref().unwrap_or_else(|| panic!("the sample [cluster]"))),
        other => panic!("[{other}]: give config_doc.rs's section_debug its field"),
    }
}

/// What is wrong with the documented default of `row`, if anything.
fn check_default(texts: &Texts, row: &Row) -> Option<String> {
    let at = format!("configuration.md:{}: {}", row.line, row.key);
    let leaf = row.key.rsplit('.').next().unwrap_or(&row.key);
    let without = parse(&texts.around(&row.key, None));
    match &row.default {
        Documented::Required => match without {
            Err(e) if e.contains(&format!("missing field `{leaf}`")) => None,
            Err(e) => Some(format!("{at}: documented required; without it: {e}")),
            Ok(_) => Some(format!("{at}: documented required, but the table parses without it")),
        },
        Documented::Value(v) => {
            let with = parse(&texts.around(&row.key, Some(v)));
            match (with, without) {
                (Ok(a), Ok(b)) if a == b => None,
                (Ok(_), Ok(_)) => Some(format!("{at}: documented default `{v}` is not the default")),
                (Err(e), _) => Some(format!("{at}: documented default `{v}` does not parse: {e}")),
                (_, Err(e)) => Some(format!("{at}: the table does not parse without it: {e}")),
            }
        }
        Documented::None => {
            let cfg = match without {
                Ok(c) => c,
                Err(e) => return Some(format!("{at}: documented none, but without it: {e}")),
            };
            let section = row.key.split('.').next().unwrap_or_default();
            if row.key.matches('.').count() != 1 {
                return Some(format!("{at}: `none` is checked on a table's own keys only"));
            }
            let debug = section_debug(&cfg, section);
            let field = format!("    {leaf}: ");
            let real = debug.lines().find(|l| l.starts_with(&field)).unwrap_or("(no such field)").trim();
            (real != format!("{leaf}: None,")).then(|| format!("{at}: documented none, but the default is {real}"))
        }
    }
}

fn page() -> String {
    let p = workspace_root().join("docs/configuration.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn the_page_lists_every_key_the_config_accepts_and_no_other() {
    let (sections, rows) = page_rows(&page());
    let accepted = accepted();
    let tables: Vec<&String> = accepted.keys().filter(|k| !k.contains('.')).collect();
    assert!(tables.len() >= 8 && accepted.len() >= 90, "read too few keys: {accepted:?}");
    let documented: BTreeMap<&str, usize> = rows.iter().map(|r| (r.key.as_str(), r.line)).collect();
    assert_eq!(documented.len(), rows.len(), "a key is listed twice: {rows:?}");
    let mut wrong: Vec<String> = accepted
        .keys()
        .filter(|k| k.contains('.') && !documented.contains_key(k.as_str()))
        .map(|k| format!("{k}: the config accepts it, the page does not list it"))
        .collect();
    wrong.extend(
        rows.iter()
            .filter(|r| !accepted.contains_key(&r.key))
            .map(|r| format!("configuration.md:{}: {}: listed, but the config refuses it", r.line, r.key)),
    );
    assert!(wrong.is_empty(), "docs/configuration.md against the config's keys:\n{}", wrong.join("\n"));
    let mut headed: Vec<&String> = sections.iter().collect();
    headed.sort();
    assert_eq!(headed, tables, "the page's ## [table] headings against the config's tables");
}

#[test]
fn each_documented_default_is_the_real_one() {
    let (_, rows) = page_rows(&page());
    let shapes = accepted();
    let texts = Texts { shapes: &shapes, rows: &rows };
    let wrong: Vec<String> = rows.iter().filter_map(|r| check_default(&texts, r)).collect();
    assert!(wrong.is_empty(), "documented defaults that are not the config's:\n{}", wrong.join("\n"));
    assert!(rows.iter().filter(|r| matches!(r.default, Documented::Value(_))).count() >= 50, "too few values read");
}

#[test]
fn rows_and_tables_are_read_as_written() {
    let page = "# Configuration\n\n## [policy]\n\nText.\n\n| key | default | what it does |\n| --- | --- | --- |\n\
                | `refuse_at` | `0.85` | Refuses. |\n| `limit_bytes` | none | A limit. |\n\n\
                | other | table |\n| `x` | y |\n\n## [[process]]\n\n| key | default | what it does |\n\
                | --- | --- | --- |\n| `name` | required | Its name. |\n| `paths` | `['a\\|b']` | Pipes. |\n\
                \n## Reload\n\nNo table.\n";
    let (sections, rows) = page_rows(page);
    assert_eq!(sections, vec!["policy", "process"]);
    let got: Vec<(&str, &Documented, usize)> = rows.iter().map(|r| (r.key.as_str(), &r.default, r.line)).collect();
    assert_eq!(
        got,
        vec![
            ("policy.refuse_at", &Documented::Value("0.85".into()), 9),
            ("policy.limit_bytes", &Documented::None, 10),
            ("process.name", &Documented::Required, 19),
            ("process.paths", &Documented::Value("['a|b']".into()), 20),
        ]
    );
    let table = [("alerts".to_string(), Shape::Table), ("basic_auth".to_string(), Shape::Table)];
    assert_eq!(nested(&table, &["username = \"u\"".into()]), "alerts = { basic_auth = { username = \"u\" } }");
    let array = [("process".to_string(), Shape::Array)];
    assert_eq!(nested(&array, &["a = 1".into(), "b = 2".into()]), "process = [{ a = 1, b = 2 }]");
    assert_eq!(fields(&[("policy".to_string(), Shape::Array)]), None, "[policy] is no array");
    assert!(fields(&[]).is_some_and(|f| f.contains(&"policy".to_string())), "the top-level tables");
}

#[test]
fn a_wrong_default_is_caught() {
    let shapes = accepted();
    let row = |key: &str, default: Documented| Row { key: key.into(), default, line: 7 };
    let rows = vec![row("process.name", Documented::Required), row("process.role", Documented::Required)];
    let rows =
        [rows, vec![row("process.command", Documented::Required), row("process.port", Documented::Required)]].concat();
    let texts = Texts { shapes: &shapes, rows: &rows };
    for (key, default, right) in [
        ("policy.refuse_at", Documented::Value("0.85".into()), true),
        ("policy.refuse_at", Documented::Value("0.8".into()), false),
        ("policy.refuse_at", Documented::None, false),
        ("policy.brake_at", Documented::None, true),
        ("policy.brake_at", Documented::Value("0.96".into()), false),
        ("proxy.token_secret", Documented::Required, false),
        ("process.port", Documented::Required, true),
        ("process.health", Documented::Value("\"/health\"".into()), true),
        ("process.health", Documented::Required, false),
        ("process.user", Documented::None, true),
        ("alerts.basic_auth.username", Documented::Required, true),
    ] {
        let err = check_default(&texts, &row(key, default.clone()));
        assert_eq!(err.is_none(), right, "{key} {default:?}: {err:?}");
    }
}
