//! Routing selection for the front door: a pure function of (routing table, request, live view of the processes).
//! No I/O; the proxy feeds it the outstanding counts, readiness and the policy's action per process.
//!
//! Rules, in order (design.md "Front door"):
//! 1. A cache id whose prefix (text before the first `.`) names a process goes to it. Owner down or prefix unknown:
//!    any tx process, with `X-Route-Fallback: owner-down|unknown-prefix`. A signed (verified) id whose owner is
//!    down is not re-routed: the caller answers 503.
//! 2. Master-only paths (`$closure`/`%24closure` anywhere, `^/syndication`, `^/info/`) go to the master: a path
//!    any of whose readings ([`paths::Readings`]: the ways a server may read it) matches one.
//! 3. Paths outside `tx_paths` go to the master: a path that some reading takes outside.
//! 4. The rest: the ready, serving tx process with the fewest outstanding requests; ties rotate.
//!
//! The one retry of a request that failed before any response byte ([`Table::retry`]) goes to another process of
//! the least-outstanding pool when rule 4 chose the first; the rules that name one process keep it.

use super::paths::{self, Readings};
use regex::{Regex, RegexSet};

/// A process's role in the group: the config's type, named here too for the routing table's users.
pub use crate::config::Role;

/// What the proxy knows about one process at the moment of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live {
    /// Running and past its health check.
    pub ready: bool,
    /// The policy lets it take new requests (`serve`; always true in shadow mode).
    pub serving: bool,
    /// Requests sent to it and not yet finished.
    pub outstanding: u32,
}

/// The request facts routing looks at.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The path as received and every way a server may read it (the received one keeps its percent-encoding, so
    /// `%24closure` is seen as such).
    pub path: &'a Readings<'a>,
    /// The prefix of the cache id header, if the request has one.
    pub cache_prefix: Option<&'a str>,
    /// The cache id was signed by the front door and verified: never fall back to another process.
    pub signed: bool,
    /// A health path: the policy's refusal does not apply.
    pub exempt: bool,
}

impl Default for Request<'_> {
    fn default() -> Self {
        static ROOT: Readings<'static> = Readings::ROOT;
        Request { path: &ROOT, cache_prefix: None, signed: false, exempt: false }
    }
}

/// Why a fallback was taken (the `X-Route-Fallback` value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    OwnerDown,
    UnknownPrefix,
}

impl Fallback {
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::OwnerDown => "owner-down",
            Fallback::UnknownPrefix => "unknown-prefix",
        }
    }
}

/// Which rule chose the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    CacheOwner,
    MasterOnly,
    NotTx,
    LeastOutstanding,
}

/// Why no process can take the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// The process that must answer (master, or a signed id's owner) is not ready.
    Down,
    /// Every candidate is refused or aborting by the memory guard.
    Shed,
    /// No candidate process is ready at all.
    NoneReady,
}

/// The outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    To { index: usize, rule: Rule, fallback: Option<Fallback> },
    Unavailable(Unavailable),
}

/// A bad regex in the config.
#[derive(Debug, thiserror::Error)]
#[error("bad path regex: {0}")]
pub struct TableError(#[from] regex::Error);

/// The static part: process names and roles, and the path rules.
#[derive(Debug, Clone)]
pub struct Table {
    names: Vec<String>,
    master: Option<usize>,
    master_paths: PathSet,
    tx_paths: PathSet,
    /// Admin endpoints: never refused by the memory guard. Matched by whole segments.
    admin_paths: PathSet,
    /// The processes least-outstanding picks from: the workers, and the master unless `master_serves_tx = false`.
    tx_pool: Vec<usize>,
}

impl Table {
    /// `procs` are (name, role) in config order.
    pub fn new(
        procs: &[(String, Role)],
        master_paths: &[String],
        tx_paths: &[String],
        master_serves_tx: bool,
    ) -> Result<Table, TableError> {
        Ok(Table {
            names: procs.iter().map(|(n, _)| n.clone()).collect(),
            master: procs.iter().position(|(_, r)| *r == Role::Master),
            master_paths: PathSet::new(master_paths)?,
            tx_paths: PathSet::new(tx_paths)?,
            admin_paths: PathSet::segments(&[])?,
            tx_pool: (0..procs.len()).filter(|&i| procs[i].1 == Role::Worker || master_serves_tx).collect(),
        })
    }

    /// The table with admin endpoints: `patterns` are regexes, `exact` plain paths (each `[[process]]
    /// admin_path: the path and what is below it).
    pub(crate) fn with_admin_paths(mut self, patterns: &[String], exact: &[String]) -> Result<Table, TableError> {
        let mut all = patterns.to_vec();
        all.extend(exact.iter().map(|p| format!("^{}", regex::escape(p))));
        self.admin_paths = PathSet::segments(&all)?;
        Ok(self)
    }

    /// True for a path of an admin endpoint ([`with_admin_paths`](Self::with_admin_paths)) however a server reads
    /// it: every reading matches a pattern, by whole segments (`^/ops` takes `/ops` and `/ops/x`, not `/opsx`).
    pub(crate) fn is_admin(&self, path: &Readings<'_>) -> bool {
        path.all(|r| self.admin_paths.is_segments_match(r))
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// The index of the process with this name.
    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Chooses the process for `req`. `live(i)` describes process `i` now; `rotor` breaks ties (pass a counter
    /// that moves with every request).
    pub fn select(&self, req: &Request<'_>, live: impl Fn(usize) -> Live, rotor: u64) -> Route {
        let usable = |l: Live| l.ready && (l.serving || req.exempt);
        if let Some(prefix) = req.cache_prefix {
            let fallback = match self.index_of(prefix) {
                Some(i) => {
                    let l = live(i);
                    if usable(l) {
                        return Route::To { index: i, rule: Rule::CacheOwner, fallback: None };
                    }
                    if l.ready {
                        // Up but refusing or aborting: the memory guard answers, not another process.
                        return Route::Unavailable(Unavailable::Shed);
                    }
                    Fallback::OwnerDown
                }
                None => Fallback::UnknownPrefix,
            };
            if req.signed {
                return Route::Unavailable(Unavailable::Down);
            }
            return match self.least_outstanding(req, &live, rotor) {
                Route::To { index, .. } => Route::To { index, rule: Rule::CacheOwner, fallback: Some(fallback) },
                other => other,
            };
        }
        let master_only = req.path.any(|p| self.master_paths.is_match(p));
        if master_only || !req.path.all(|p| self.tx_paths.is_match(p)) {
            let rule = if master_only { Rule::MasterOnly } else { Rule::NotTx };
            let Some(m) = self.master else { return Route::Unavailable(Unavailable::Down) };
            let l = live(m);
            return if usable(l) {
                Route::To { index: m, rule, fallback: None }
            } else if l.ready {
                Route::Unavailable(Unavailable::Shed)
            } else {
                Route::Unavailable(Unavailable::Down)
            };
        }
        self.least_outstanding(req, &live, rotor)
    }

    /// Where the one retry of a request goes after process `failed`, chosen by `rule`, failed before sending any
    /// response byte: when least-outstanding chose it, the least-outstanding usable process other than `failed`
    /// (the same one if it is the only one); when a rule named the process (cache-id owner, master-only, not tx),
    /// the same process. `exempt`: a health path (the memory guard's refusal does not apply).
    pub fn retry(&self, rule: Rule, exempt: bool, live: impl Fn(usize) -> Live, rotor: u64, failed: usize) -> usize {
        if rule != Rule::LeastOutstanding {
            return failed;
        }
        let req = Request { exempt, ..Request::default() };
        let others = |i: usize| if i == failed { Live { ready: false, ..live(i) } } else { live(i) };
        match self.least_outstanding(&req, &others, rotor) {
            Route::To { index, .. } => index,
            Route::Unavailable(_) => failed,
        }
    }

    /// One pass, one `live` call per process (the counts move under us): the first usable process with the
    /// fewest outstanding requests, starting at a rotating place in the pool so ties rotate.
    fn least_outstanding(&self, req: &Request<'_>, live: &impl Fn(usize) -> Live, rotor: u64) -> Route {
        let n = self.tx_pool.len();
        if n == 0 {
            return Route::Unavailable(Unavailable::NoneReady);
        }
        let start = (rotor % n as u64) as usize;
        let mut best: Option<(usize, u32)> = None;
        let mut any_ready = false;
        for k in 0..n {
            let i = self.tx_pool[(start + k) % n];
            let l = live(i);
            any_ready |= l.ready;
            if l.ready && (l.serving || req.exempt) && best.is_none_or(|(_, o)| l.outstanding < o) {
                best = Some((i, l.outstanding));
            }
        }
        match best {
            Some((index, _)) => Route::To { index, rule: Rule::LeastOutstanding, fallback: None },
            None if any_ready => Route::Unavailable(Unavailable::Shed),
            None => Route::Unavailable(Unavailable::NoneReady),
        }
    }
}

/// Path regexes, matched as the regex crate would, but those that are plain text (optionally anchored with `^`,
/// like every default: `^/`, `\$closure`, `%24closure`, `^/syndication`, `^/info/`) compared as text: on every
/// request a regex search costs more than the rest of the routing.
#[derive(Debug, Clone)]
struct PathSet {
    /// `^text`: the path starts with it.
    prefixes: Vec<String>,
    /// `text`: the path contains it (a searcher made once: `str::contains` makes one per call).
    contains: Vec<memchr::memmem::Finder<'static>>,
    /// Every other pattern.
    rest: Option<RegexSet>,
    /// Matched by whole segments ([`PathSet::segments`]): the unanchored texts (as written and in lower case), and
    /// every other pattern alone.
    texts: Vec<(String, String)>,
    each: Vec<Regex>,
}

impl PathSet {
    fn new(patterns: &[String]) -> Result<PathSet, regex::Error> {
        // Every pattern must be a valid regex, whichever way it is matched.
        RegexSet::new(patterns)?;
        let (mut prefixes, mut contains, mut rest) = (Vec::new(), Vec::new(), Vec::new());
        for p in patterns {
            match literals(p) {
                Some(texts) => {
                    for (anchored, text) in texts {
                        match anchored {
                            true => prefixes.push(text),
                            false => contains.push(memchr::memmem::Finder::new(text.as_bytes()).into_owned()),
                        }
                    }
                }
                None => rest.push(p.as_str()),
            }
        }
        let rest = if rest.is_empty() { None } else { Some(RegexSet::new(rest)?) };
        Ok(PathSet { prefixes, contains, rest, texts: Vec::new(), each: Vec::new() })
    }

    /// The set for [`PathSet::is_segments_match`].
    fn segments(patterns: &[String]) -> Result<PathSet, regex::Error> {
        let mut set = PathSet::new(patterns)?;
        set.texts = std::mem::take(&mut set.contains)
            .iter()
            .map(|f| {
                let t = String::from_utf8_lossy(f.needle()).into_owned();
                let lower = t.to_ascii_lowercase();
                (t, lower)
            })
            .collect();
        if set.rest.take().is_some() {
            set.each =
                patterns.iter().filter(|p| literals(p).is_none()).map(|p| Regex::new(p)).collect::<Result<_, _>>()?;
        }
        Ok(set)
    }

    fn is_match(&self, path: &str) -> bool {
        self.prefixes.iter().any(|p| path.starts_with(p.as_str()))
            || self.contains.iter().any(|c| c.find(path.as_bytes()).is_some())
            || self.rest.as_ref().is_some_and(|r| r.is_match(path))
    }

    /// True when a pattern matches whole segments of `path` ([`paths::whole_segments`]). A path with no capitals
    /// (a reading with letters folded) is compared with the texts without case.
    fn is_segments_match(&self, path: &str) -> bool {
        let fold = !path.bytes().any(|b| b.is_ascii_uppercase());
        let starts = |p: &str| match path.as_bytes().get(..p.len()) {
            Some(head) if fold => head.eq_ignore_ascii_case(p.as_bytes()),
            Some(head) => head == p.as_bytes(),
            None => false,
        };
        self.prefixes.iter().any(|p| starts(p) && paths::whole_segments(path, 0, p.len()))
            || self.texts.iter().any(|(t, lower)| {
                let t = if fold { lower } else { t };
                path.match_indices(t.as_str()).any(|(i, m)| paths::whole_segments(path, i, i + m.len()))
            })
            || self.each.iter().any(|r| r.find_iter(path).any(|m| paths::whole_segments(path, m.start(), m.end())))
    }
}

/// The texts ([`literal`]) that the (valid) regex `pattern` is an alternation of: `a|b`, or one group of
/// alternatives between text, `x(a|b)y` (the default master paths' `(\$|%24)closure`); None for any other.
fn literals(pattern: &str) -> Option<Vec<(bool, String)>> {
    // The unescaped operators' byte offsets: `\` escapes the next character, always one byte here (escapes of
    // anything else are not text, and `literal` refuses them).
    let (mut open, mut close, mut bars) = (Vec::new(), Vec::new(), Vec::new());
    let mut bytes = pattern.bytes().enumerate();
    while let Some((i, b)) = bytes.next() {
        match b {
            b'\\' => {
                bytes.next();
            }
            b'(' => open.push(i),
            b')' => close.push(i),
            b'|' => bars.push(i),
            _ => {}
        }
    }
    // The alternatives lie between `from` and `to`, with `head` before and `tail` after each.
    let (head, tail, from, to) = match (open.as_slice(), close.as_slice()) {
        ([], []) => ("", "", 0, pattern.len()),
        (&[o], &[c]) if o < c && !pattern[o + 1..].starts_with('?') && bars.iter().all(|&b| o < b && b < c) => {
            (&pattern[..o], &pattern[c + 1..], o + 1, c)
        }
        _ => return None,
    };
    let mut start = from;
    let mut out = Vec::with_capacity(bars.len() + 1);
    for &end in bars.iter().chain(std::iter::once(&to)) {
        out.push(literal(&format!("{head}{}{tail}", &pattern[start..end]))?);
        start = end + 1;
    }
    Some(out)
}

/// `Some((anchored, text))` when the (valid) regex `pattern` matches exactly `text`, at the start of the path
/// when `anchored` (a leading `^`), anywhere otherwise: no operator, class or flag, and escapes only of
/// punctuation (`\<` and `\>` are word boundaries, not text).
fn literal(pattern: &str) -> Option<(bool, String)> {
    let (anchored, body) = match pattern.strip_prefix('^') {
        Some(b) => (true, b),
        None => (false, pattern),
    };
    let mut text = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) if e.is_ascii_punctuation() && e != '<' && e != '>' => text.push(e),
                _ => return None,
            },
            '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$' => return None,
            c => text.push(c),
        }
    }
    Some((anchored, text))
}

/// The prefix of a cache id: the text before the first `.` (the whole id when it has none).
pub fn cache_prefix(id: &str) -> &str {
    id.split('.').next().unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProxyConfig;
    use std::collections::BTreeSet;

    const UP: Live = Live { ready: true, serving: true, outstanding: 0 };
    const DOWN: Live = Live { ready: false, serving: true, outstanding: 0 };
    const REFUSING: Live = Live { ready: true, serving: false, outstanding: 0 };

    fn table(master_serves_tx: bool, tx_paths: &[&str]) -> Table {
        let d = ProxyConfig::default();
        let procs = [("m0", Role::Master), ("tx1", Role::Worker), ("tx2", Role::Worker)];
        let procs: Vec<(String, Role)> = procs.iter().map(|(n, r)| (n.to_string(), *r)).collect();
        let tx: Vec<String> = tx_paths.iter().map(|s| s.to_string()).collect();
        Table::new(&procs, &d.master_paths, &tx, master_serves_tx).expect("valid table")
    }

    fn to(index: usize, rule: Rule, fallback: Option<Fallback>) -> Route {
        Route::To { index, rule, fallback }
    }

    fn req<'a>(path: &'a str, cache: Option<&'a str>) -> Request<'a> {
        Request { path: Box::leak(Box::new(Readings::of(path))), cache_prefix: cache, ..Request::default() }
    }

    #[test]
    fn plain_text_patterns_are_matched_as_text() {
        let cases: &[(&str, Option<(bool, &str)>)] = &[
            ("^/", Some((true, "/"))),
            ("\\$closure", Some((false, "$closure"))),
            ("%24closure", Some((false, "%24closure"))),
            ("^/info/", Some((true, "/info/"))),
            ("^/a\\.b\\-c", Some((true, "/a.b-c"))),
            ("", Some((false, ""))),
            ("^/r4/.*", None),
            ("/x$", None),
            ("(?i)^/info", None),
            ("^/a\\d", None),
            ("\\<word", None),
        ];
        for (pattern, want) in cases {
            let got = literal(pattern);
            assert_eq!(got.as_ref().map(|(a, t)| (*a, t.as_str())), *want, "{pattern:?}");
        }
    }

    #[test]
    fn alternations_of_text_are_matched_as_text() {
        type Texts = Option<Vec<(bool, String)>>;
        let t = |v: &[(bool, &str)]| -> Texts { Some(v.iter().map(|(a, s)| (*a, s.to_string())).collect()) };
        let cases: &[(&str, Texts)] = &[
            (r"(\$|%24)closure", t(&[(false, "$closure"), (false, "%24closure")])),
            ("^/a|/b", t(&[(true, "/a"), (false, "/b")])),
            ("^/(info|about)/", t(&[(true, "/info/"), (true, "/about/")])),
            ("^/x", t(&[(true, "/x")])),
            (r"\(a|b\)", t(&[(false, "(a"), (false, "b)")])),
            ("(a|b)+", None),
            ("(a|b)$", None),
            ("(?i)a|b", None),
            ("(?:a|b)", None),
            ("(a|b)(c|d)", None),
            ("a|(b|c)", None),
            ("x(^a|b)", None),
        ];
        for (pattern, want) in cases {
            assert_eq!(&literals(pattern), want, "{pattern:?}");
        }
    }

    proptest::proptest! {
        /// Whatever the patterns, the set matches exactly the paths the regex crate matches.
        #[test]
        fn path_sets_match_as_the_regex_crate_does(
            patterns in proptest::collection::vec("\\^?([a-c/.$%|*?()]|\\\\[.$/dw<()]){0,6}", 0..4),
            path in "[a-c/.$%]{0,8}",
        ) {
            let Ok(want) = RegexSet::new(&patterns) else { return Ok(()) };
            let set = PathSet::new(&patterns).expect("valid regexes");
            proptest::prop_assert_eq!(set.is_match(&path), want.is_match(&path), "{:?} on {:?}", patterns, path);
        }
    }

    #[test]
    fn the_rules_in_order() {
        let t = table(true, &["^/r4/", "^/tx/"]);
        let tx1_busiest = |i: usize| Live { outstanding: [1, 5, 0][i], ..UP };
        let cases: &[(&str, Option<&str>, Route)] = &[
            ("/r4/ValueSet/$expand", Some("tx1"), to(1, Rule::CacheOwner, None)),
            ("/r4/ValueSet/$expand", Some("m0"), to(0, Rule::CacheOwner, None)),
            ("/r4/ValueSet/$expand", Some("zz9"), to(2, Rule::CacheOwner, Some(Fallback::UnknownPrefix))),
            ("/r4/ConceptMap/$closure", None, to(0, Rule::MasterOnly, None)),
            ("/r4/ConceptMap/%24closure", None, to(0, Rule::MasterOnly, None)),
            ("/r4/$closure?x=1", None, to(0, Rule::MasterOnly, None)),
            ("/syndication/feed", None, to(0, Rule::MasterOnly, None)),
            ("/info/vsac", None, to(0, Rule::MasterOnly, None)),
            ("/tx/info/vsac", None, to(2, Rule::LeastOutstanding, None)),
            ("/packages/list", None, to(0, Rule::NotTx, None)),
            ("/", None, to(0, Rule::NotTx, None)),
            ("/r4/CodeSystem/$lookup", None, to(2, Rule::LeastOutstanding, None)),
        ];
        for (path, cache, want) in cases {
            assert_eq!(t.select(&req(path, *cache), tx1_busiest, 0), *want, "{path} {cache:?}");
        }
    }

    #[test]
    fn admin_paths_are_the_patterns_and_the_processes_own_paths() {
        let procs = [("m0".to_string(), Role::Master)];
        let t = Table::new(&procs, &[], &["^/".to_string()], true).expect("valid table");
        let admin = |t: &Table, p: &str| t.is_admin(&Readings::of(p));
        assert!(!admin(&t, "/admin/memory"), "no admin path unless configured");
        let t = t
            .with_admin_paths(
                &["^/ops/".to_string(), "reload$".to_string()],
                &["/admin/memory".to_string(), "/a.b".to_string()],
            )
            .expect("valid patterns");
        for p in ["/ops/x", "/x/reload", "/admin/memory", "/admin/memory/2", "/a.b"] {
            assert!(admin(&t, p), "{p}");
        }
        for p in ["/", "/ops", "/reload/x", "/admin/mem", "/aXb", "/r4/admin/memory", "/admin/memoryx", "/x/reloadx"] {
            assert!(!admin(&t, p), "{p}");
        }
    }

    #[test]
    fn owner_down_falls_back_to_a_tx_process_unless_signed() {
        let t = table(false, &["^/"]);
        let live = |i: usize| if i == 1 { DOWN } else { UP };
        let r = t.select(&req("/r4/x", Some("tx1")), live, 0);
        assert_eq!(r, to(2, Rule::CacheOwner, Some(Fallback::OwnerDown)));
        let signed = Request { signed: true, ..req("/r4/x", Some("tx1")) };
        assert_eq!(t.select(&signed, live, 0), Route::Unavailable(Unavailable::Down));
        // An owner that is up but refused by the memory guard is not bypassed.
        let live = |i: usize| if i == 1 { REFUSING } else { UP };
        assert_eq!(t.select(&req("/r4/x", Some("tx1")), live, 0), Route::Unavailable(Unavailable::Shed));
    }

    #[test]
    fn least_outstanding_ties_rotate_and_master_joins_unless_told_not_to() {
        let t = table(true, &["^/"]);
        let picks: Vec<usize> = (0..6)
            .map(|r| match t.select(&req("/r4/x", None), |_| UP, r) {
                Route::To { index, .. } => index,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        let t = table(false, &["^/"]);
        let picks: Vec<usize> = (0..4)
            .map(|r| match t.select(&req("/r4/x", None), |_| UP, r) {
                Route::To { index, .. } => index,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(picks, [1, 2, 1, 2]);
        let uneven = |i: usize| Live { outstanding: [0, 3, 2][i], ..UP };
        assert_eq!(t.select(&req("/r4/x", None), uneven, 7), to(2, Rule::LeastOutstanding, None));
    }

    #[test]
    fn not_ready_and_refusing_processes_are_skipped() {
        let t = table(true, &["^/"]);
        let live = |i: usize| [REFUSING, DOWN, UP][i];
        assert_eq!(t.select(&req("/r4/x", None), live, 0), to(2, Rule::LeastOutstanding, None));
        assert_eq!(
            t.select(&req("/r4/x", None), |i| [REFUSING, DOWN, REFUSING][i], 0),
            Route::Unavailable(Unavailable::Shed)
        );
        assert_eq!(t.select(&req("/r4/x", None), |_| DOWN, 0), Route::Unavailable(Unavailable::NoneReady));
        assert_eq!(t.select(&req("/info/x", None), |_| DOWN, 0), Route::Unavailable(Unavailable::Down));
        assert_eq!(t.select(&req("/info/x", None), |_| REFUSING, 0), Route::Unavailable(Unavailable::Shed));
        // Health paths are exempt from the refusal.
        let health = Request { exempt: true, ..req("/health", None) };
        assert!(matches!(t.select(&health, |_| REFUSING, 0), Route::To { .. }));
    }

    #[test]
    fn counts_that_move_during_the_choice_never_leave_it_empty() {
        // Each look sees a new count (other requests finish and start meanwhile): a process is still chosen.
        let t = table(true, &["^/"]);
        let calls = std::cell::Cell::new(0u32);
        for rotor in 0..50 {
            let live = |_: usize| {
                calls.set(calls.get() + 1);
                Live { outstanding: calls.get() % 3, ..UP }
            };
            assert!(matches!(t.select(&req("/r4/x", None), live, rotor), Route::To { .. }));
        }
        assert_eq!(calls.get(), 150, "one look per process per request");
    }

    #[test]
    fn a_retry_goes_elsewhere_only_after_least_outstanding() {
        let t = table(true, &["^/r4/"]);
        // (rule, failed, live, want)
        type Case = (Rule, usize, fn(usize) -> Live, usize);
        let cases: &[Case] = &[
            // The least-outstanding of the others, even when the failed one has fewer.
            (Rule::LeastOutstanding, 1, |i| Live { outstanding: [4, 0, 2][i], ..UP }, 2),
            (Rule::LeastOutstanding, 2, |i| Live { outstanding: [4, 0, 2][i], ..UP }, 1),
            (Rule::LeastOutstanding, 0, |i| Live { outstanding: [4, 0, 2][i], ..UP }, 1),
            // The others down or refusing: the same process once more.
            (Rule::LeastOutstanding, 1, |i| [DOWN, UP, REFUSING][i], 1),
            // A rule that named the process keeps it.
            (Rule::CacheOwner, 1, |_| UP, 1),
            (Rule::MasterOnly, 0, |_| UP, 0),
            (Rule::NotTx, 0, |_| UP, 0),
        ];
        for (rule, failed, live, want) in cases {
            assert_eq!(t.retry(*rule, false, live, 0, *failed), *want, "{rule:?} after {failed}");
        }
        // Ties among the others rotate.
        let picks: BTreeSet<usize> =
            (0..4).map(|rotor| t.retry(Rule::LeastOutstanding, false, |_| UP, rotor, 0)).collect();
        assert_eq!(picks, [1, 2].into());
    }

    #[test]
    fn cache_prefix_is_the_text_before_the_first_dot() {
        assert_eq!(cache_prefix("tx1.6f1c.abc"), "tx1");
        assert_eq!(cache_prefix("tx1"), "tx1");
        assert_eq!(cache_prefix(""), "");
        assert_eq!(cache_prefix(".x"), "");
    }
}
