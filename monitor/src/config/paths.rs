//! The ways a server may read a request's path. The front door's decisions about a path (the agent's channel, the
//! master-only paths, the paths exempt from the refusal, the route key) are made on the path as the process behind
//! it will read it, and the front door does not know how that is: it sends the path on as it came. So each decision
//! looks at every reading ([`Readings::of`]): a path is denied when any reading is, and exempt only when every
//! reading is.
//!
//! A reading is the path through these steps, each taken or not, in this order:
//! 1. `;` parameters cut from every segment (`/admin;x/memory` is `/admin/memory`, as a servlet container reads it);
//! 2. `%`-escapes decoded: not, once, or again until nothing changes (some servers decode twice);
//! 3. `\` read as `/`;
//! 4. `;` parameters cut again (a server that decodes first sees `%3B` as `;`, one that reads `\` as `/` cuts there);
//! 5. runs of `/` read as one;
//! 6. `.` and `..` segments resolved;
//! 7. letters folded to lower case.
//!
//! A step that changes nothing adds no reading, so a plain lowercase path has one reading and a plain path with
//! capitals two. At most [`MAX_READINGS`] in all, none more than half as long again as the path (decoding never
//! lengthens it; folding some letters does). Pure: no IO.

use std::borrow::Cow;

/// The most readings of one path: two ways for each step, three for decoding.
pub const MAX_READINGS: usize = 3 << 6;

/// Rounds of decoding in "until nothing changes": each round that changes the text shortens it, and no server
/// decodes more often than this.
const DECODE_ROUNDS: usize = 8;

/// The readings of one path: the path as it came, then the others, each once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readings<'a> {
    raw: &'a str,
    /// The path's letters folded, when that is its only other reading (most paths with capitals): kept apart
    /// from `more`, so such a path makes one allocation, not two.
    folded: Option<String>,
    more: Vec<String>,
}

impl Default for Readings<'_> {
    fn default() -> Self {
        Readings::ROOT
    }
}

impl<'a> Readings<'a> {
    /// The root's one reading.
    pub const ROOT: Readings<'static> = Readings { raw: "/", folded: None, more: Vec::new() };

    /// Every reading of `path` (a request's path, without its query).
    pub fn of(path: &'a str) -> Readings<'a> {
        let mut r = Readings { raw: path, folded: None, more: Vec::new() };
        // Most paths take none of the steps but the last: one pass over the bytes tells.
        let (mut odd, mut upper, mut wide, mut prev) = (false, false, false, 0u8);
        for &c in path.as_bytes() {
            odd |= matches!(c, b';' | b'%' | b'\\') || (c == b'/' && prev == b'/');
            upper |= c.is_ascii_uppercase();
            wide |= c >= 0x80;
            prev = c;
        }
        if !odd && !has_dot_segment(path) {
            if wide {
                r.folded = Some(path.to_lowercase()).filter(|f| f != path);
            } else if upper {
                // ASCII only: folded byte by byte, as `to_lowercase` would fold it.
                r.folded = Some(path.to_ascii_lowercase());
            }
            return r;
        }
        r.grow(|s| [s.contains(';').then(|| strip_params(s)), None]);
        r.grow(|s| {
            if !s.contains('%') {
                return [None, None];
            }
            let once = decode(s);
            let mut full = once.clone();
            for _ in 1..DECODE_ROUNDS {
                if !full.contains('%') {
                    break;
                }
                let next = decode(&full);
                if next == full {
                    break;
                }
                full = next;
            }
            [Some(once), Some(full)]
        });
        r.grow(|s| [s.contains('\\').then(|| s.replace('\\', "/")), None]);
        r.grow(|s| [s.contains(';').then(|| strip_params(s)), None]);
        r.grow(|s| [s.contains("//").then(|| merge_slashes(s)), None]);
        r.grow(|s| [has_dot_segment(s).then(|| resolve_dots(s)), None]);
        r.grow(|s| [s.bytes().any(|b| b.is_ascii_uppercase() || b >= 0x80).then(|| s.to_lowercase()), None]);
        r
    }

    /// Adds what `step` makes of each reading so far, when it is new.
    fn grow(&mut self, step: impl Fn(&str) -> [Option<String>; 2]) {
        for i in 0..=self.more.len() {
            let made = step(if i == 0 { self.raw } else { &self.more[i - 1] });
            for m in made.into_iter().flatten() {
                if m != self.raw && !self.more.contains(&m) {
                    self.more.push(m);
                }
            }
        }
    }

    /// The path as it came.
    pub fn raw(&self) -> &'a str {
        self.raw
    }

    /// Every reading, the path as it came first.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.raw).chain(self.folded.as_deref()).chain(self.more.iter().map(String::as_str))
    }

    /// How many readings.
    pub fn len(&self) -> usize {
        1 + usize::from(self.folded.is_some()) + self.more.len()
    }

    /// Never: the path as it came is one.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// True when `f` holds for some reading.
    pub fn any(&self, f: impl FnMut(&str) -> bool) -> bool {
        self.iter().any(f)
    }

    /// True when `f` holds for every reading.
    pub fn all(&self, f: impl FnMut(&str) -> bool) -> bool {
        self.iter().all(f)
    }

    /// True when every reading is one of `bases` or below it, by whole segments ([`under`]): what exempts a path.
    /// A reading with no capitals (letters folded) is compared with the bases without case, so a base with capitals
    /// still takes its own path.
    pub fn all_under(&self, bases: &[String]) -> bool {
        self.all(|r| {
            let fold = !r.bytes().any(|b| b.is_ascii_uppercase());
            bases.iter().any(|b| under(r, b, fold))
        })
    }

    /// True when some reading is one of `bases` or below it, letters compared without case: what denies a path.
    pub fn any_under(&self, bases: &[String]) -> bool {
        self.any(|r| bases.iter().any(|b| under(r, b, true)))
    }
}

/// The one reading that names a path the same however it was spelt, as a servlet container reads it: `;`
/// parameters cut, escapes decoded once, dot segments resolved; case, `\` and runs of `/` kept. One of
/// [`Readings::of`]'s.
pub fn canonical(path: &str) -> Cow<'_, str> {
    let mut s = Cow::Borrowed(path);
    if s.contains(';') {
        s = Cow::Owned(strip_params(&s));
    }
    if s.contains('%') {
        s = Cow::Owned(decode(&s));
    }
    if has_dot_segment(&s) {
        s = Cow::Owned(resolve_dots(&s));
    }
    s
}

/// The strongest reading of `path` (every step taken), without a trailing `/`: how a path the front door guards is
/// kept, so that comparing a request's readings with it needs no more work.
pub fn strongest(path: &str) -> String {
    let mut s = strip_params(path);
    for _ in 0..DECODE_ROUNDS {
        let next = decode(&s);
        if next == s {
            break;
        }
        s = next;
    }
    let mut s = resolve_dots(&merge_slashes(&strip_params(&s.replace('\\', "/")))).to_lowercase();
    while s.len() > 1 && s.ends_with('/') {
        s.pop();
    }
    s
}

/// True when `path` is `base` or below it, by whole segments: `/health` takes `/health` and `/health/live`, never
/// `/healthx`; the root takes only itself. `fold`: letters compared without case.
pub fn under(path: &str, base: &str, fold: bool) -> bool {
    let base = if base.len() > 1 { base.strip_suffix('/').unwrap_or(base) } else { base };
    if base.is_empty() {
        return false;
    }
    if base == "/" {
        return path == "/";
    }
    let Some(head) = path.as_bytes().get(..base.len()) else { return false };
    let same = if fold { head.eq_ignore_ascii_case(base.as_bytes()) } else { head == base.as_bytes() };
    same && matches!(path.as_bytes().get(base.len()), None | Some(b'/'))
}

/// True when the text from `start` to `end` of `path` is whole segments: it starts at a segment's start (or with
/// `/`) and ends at a segment's end (or with `/`).
pub fn whole_segments(path: &str, start: usize, end: usize) -> bool {
    let b = path.as_bytes();
    let starts = start == 0 || b.get(start) == Some(&b'/') || b.get(start - 1) == Some(&b'/');
    let ends = end >= b.len() || b.get(end) == Some(&b'/') || (end > start && b.get(end - 1) == Some(&b'/'));
    starts && ends
}

/// Every segment's `;` parameters cut: up to the next `/`.
fn strip_params(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut cut = false;
    for c in s.chars() {
        match c {
            '/' => {
                cut = false;
                out.push(c);
            }
            ';' => cut = true,
            c if !cut => out.push(c),
            _ => {}
        }
    }
    out
}

/// One round of `%`-decoding; bytes that are not UTF-8 read as U+FFFD.
fn decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    match String::from_utf8(out) {
        Ok(t) => t,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

fn merge_slashes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    out
}

fn has_dot_segment(s: &str) -> bool {
    let b = s.as_bytes();
    s.starts_with('/')
        && memchr::memchr_iter(b'.', b).any(|i| {
            let after = |k: usize| b.get(i + k).is_none_or(|&c| c == b'/');
            b.get(i.wrapping_sub(1)) == Some(&b'/') && (after(1) || (b.get(i + 1) == Some(&b'.') && after(2)))
        })
}

/// `.` and `..` segments of an absolute path resolved (RFC 3986 §5.2.4): `..` above the root stays at the root,
/// and a path that ends in a dot segment ends in `/`. Empty segments are segments, as the RFC has them.
fn resolve_dots(s: &str) -> String {
    let Some(rest) = s.strip_prefix('/') else { return s.to_string() };
    let mut out: Vec<&str> = Vec::new();
    let mut trailing = false;
    for seg in rest.split('/') {
        trailing = matches!(seg, "." | "..");
        match seg {
            "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    if trailing {
        out.push("");
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(p: &str) -> Vec<String> {
        Readings::of(p).iter().map(str::to_string).collect()
    }

    #[test]
    fn a_plain_path_has_one_reading_and_capitals_add_one() {
        assert_eq!(all("/r4/heavy"), ["/r4/heavy"]);
        assert_eq!(all("/r4/CodeSystem/$lookup"), ["/r4/CodeSystem/$lookup", "/r4/codesystem/$lookup"]);
        assert_eq!(all("*"), ["*"]);
    }

    #[test]
    fn each_step_adds_its_reading() {
        let cases: &[(&str, &str)] = &[
            ("/admin;x/memory", "/admin/memory"),
            ("/admin/memory;jsessionid=1/", "/admin/memory/"),
            ("/admin/%6demory", "/admin/memory"),
            ("/admin/%256demory", "/admin/memory"),
            ("/admin/memory%3Bx", "/admin/memory"),
            ("\\admin\\memory", "/admin/memory"),
            ("/admin;x\\memory", "/admin/memory"),
            ("/a;x\\b/memory", "/a/memory"),
            ("//admin//memory", "/admin/memory"),
            ("/admin/memory/../../r4/heavy", "/r4/heavy"),
            ("/admin/x/..;/memory", "/admin/memory"),
            ("/%2e%2e/admin/./memory", "/admin/memory"),
            ("/ADMIN/Memory", "/admin/memory"),
            ("/health;x/../r4/heavy", "/r4/heavy"),
        ];
        for (p, want) in cases {
            let r = Readings::of(p);
            assert!(r.any(|s| s == *want), "{p}: {:?}", r.iter().collect::<Vec<_>>());
            assert_eq!(r.raw(), *p);
            assert!(r.len() <= MAX_READINGS);
        }
    }

    #[test]
    fn the_canonical_reading_is_a_reading_and_names_re_spellings_alike() {
        for p in ["/r4/Patient/1", "/r4;x/Patient/1", "/r4/%50atient/1", "/r4/./Patient/x/../1", "/a//b", "*", "/"] {
            let c = canonical(p);
            assert!(Readings::of(p).any(|s| s == c), "{p} -> {c}");
        }
        assert_eq!(canonical("/r4;x/%50atient/./1"), "/r4/Patient/1");
        assert_eq!(canonical("/a//b"), "/a//b", "runs of / kept");
        assert_eq!(canonical("/A"), "/A", "case kept");
    }

    #[test]
    fn dot_segments_are_whole_segments() {
        for (p, want) in [
            ("/a/./b", true),
            ("/a/../b", true),
            ("/..", true),
            ("/.", true),
            ("/a/..", true),
            ("/a/.b", false),
            ("/a/b.", false),
            ("/a/...", false),
            ("/a/..b/c", false),
            ("a/../b", false),
            ("/", false),
        ] {
            assert_eq!(has_dot_segment(p), want, "{p}");
        }
    }

    #[test]
    fn under_is_by_whole_segments() {
        let cases: &[(&str, &str, bool, bool)] = &[
            ("/health", "/health", false, true),
            ("/health/live", "/health", false, true),
            ("/health/", "/health", false, true),
            ("/healthx", "/health", false, false),
            ("/HEALTH", "/health", false, false),
            ("/HEALTH", "/health", true, true),
            ("/ops/x", "/ops/", false, true),
            ("/ops", "/ops/", false, true),
            ("/x", "/", false, false),
            ("/", "/", false, true),
            ("/h", "/health", false, false),
        ];
        for (p, base, fold, want) in cases {
            assert_eq!(under(p, base, *fold), *want, "{p} under {base} fold {fold}");
        }
    }

    #[test]
    fn the_strongest_reading_takes_every_step() {
        assert_eq!(strongest("/Admin//x/..;/Memory/"), "/admin/memory");
        assert_eq!(strongest("/%2561dmin\\memory"), "/admin/memory");
        assert_eq!(strongest("/"), "/");
    }

    #[test]
    fn odd_bytes_never_panic() {
        for p in ["%", "%4", "%%%", "/%ff%fe", "/..", "", "/a/b/../../../..", "/\u{130}", "/%c4%b0", ";", "/;/;", "\\"]
        {
            let r = Readings::of(p);
            assert!(r.len() <= MAX_READINGS, "{p:?}");
            let _ = canonical(p);
            let _ = strongest(p);
        }
    }
}
