//! The readings of a request path (monitor::config::paths): any text gives at most `MAX_READINGS` readings and never
//! a panic; the path as it came is the first, its canonical reading is one of them, and so is the path as a servlet
//! container and as nginx read it (modelled here apart from the code); a path that such a server reads as a guarded
//! path is denied.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::config::paths::{canonical, strongest, Readings, MAX_READINGS};

/// One round of %-decoding, bytes that are not UTF-8 as U+FFFD.
fn decode(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let pair =
            b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], pair) {
            (b'%', Some(v)) if b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit() => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `.` and `..` segments resolved, as RFC 3986 §5.2.4 does on an absolute path.
fn resolve(s: &str) -> String {
    let Some(rest) = s.strip_prefix('/') else { return s.to_string() };
    if !s.split('/').any(|g| g == "." || g == "..") {
        return s.to_string();
    }
    let mut out: Vec<&str> = Vec::new();
    let segs: Vec<&str> = rest.split('/').collect();
    for (k, g) in segs.iter().enumerate() {
        match *g {
            "." => {}
            ".." => {
                out.pop();
            }
            g => out.push(g),
        }
        if k + 1 == segs.len() && (*g == "." || *g == "..") {
            out.push("");
        }
    }
    format!("/{}", out.join("/"))
}

/// Tomcat's reading: `;` parameters cut from each segment, decoded once, runs of `/` merged, dots resolved.
fn servlet(path: &str) -> String {
    let cut: Vec<&str> = path.split('/').map(|g| g.split(';').next().unwrap_or(g)).collect();
    let mut s = decode(&cut.join("/"));
    while s.contains("//") {
        s = s.replace("//", "/");
    }
    resolve(&s)
}

/// nginx's reading: decoded once, runs of `/` merged, dots resolved.
fn nginx(path: &str) -> String {
    let mut s = decode(path);
    while s.contains("//") {
        s = s.replace("//", "/");
    }
    resolve(&s)
}

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else { return };
    let r = Readings::of(path);
    assert!(r.len() <= MAX_READINGS, "{} readings of {path:?}", r.len());
    assert_eq!(r.iter().next(), Some(path));
    let c = canonical(path);
    assert!(r.any(|s| s == c), "the canonical reading {c:?} of {path:?} is not a reading");
    for (name, read) in [("servlet", servlet(path)), ("nginx", nginx(path))] {
        assert!(r.any(|s| s == read), "{name} reads {path:?} as {read:?}, not a reading");
        // A guarded path that such a server reads it as (one a config would name: absolute, plain): denied.
        let plain = !read.contains(['%', ';', '\\']) && !read.contains("//") && resolve(&read) == read;
        if read.starts_with('/') && read != "/" && plain {
            assert!(r.any_under(&[strongest(&read)]), "{path:?}, read as {read:?}, is not denied");
        }
    }
});
