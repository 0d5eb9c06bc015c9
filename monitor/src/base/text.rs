//! Outside strings made safe to print: a process's name, a request's path, a peer's node name may hold a newline
//! (a forged log line) or an escape sequence (a terminal taken over). [`escape_controls`] writes every control
//! character as a visible escape; it is applied where such a string enters (the process names read from `/proc`)
//! and again by the text sinks (the log's fields, `monitor status`, `monitor report`) with [`controls_only`].

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` is a control character: C0 (U+0000..U+001F), DEL (U+007F) or C1 (U+0080..U+009F).
fn is_control(c: char) -> bool {
    c.is_control()
}

/// Writes control `c` as `\n`, `\t`, `\r`, `\e` (ESC) or `\u{..}`.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        '\x1b' => out.push_str("\\e"),
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// `s` with every control character written as an escape (`\n`, `\t`, `\r`, `\e`, else `\u{..}`) and every
/// backslash doubled, so that an escape in the result always stands for a control character of `s`: `a\nb` (a
/// newline) and `a\\nb` (a backslash, then `n`) stay apart. Borrowed when there is nothing to escape.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| is_control(c) || c == '\\') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if is_control(c) => push_escaped(&mut out, c),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `s` with every control character written as an escape as [`escape_controls`] writes it, backslashes left as
/// they are: for a sink (a log line, a table) whose strings may already have been escaped where they entered, so
/// that an escape is not escaped twice. It keeps a string to one line and free of terminal sequences; the escape
/// is unambiguous only for the strings escaped where they entered.
pub fn controls_only(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if is_control(c) => push_escaped(&mut out, c),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A rendered text (lines ending in `\n`) with every other control character escaped ([`controls_only`]): the
/// last guard of a text printed to a terminal, which keeps its own line breaks.
pub fn controls_but_newlines(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| is_control(c) && c != '\n') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&controls_only(line));
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        for s in ["", "postgres", "tx1#2", "caf\u{e9} \u{1f600}", "a) b (c"] {
            assert!(matches!(escape_controls(s), Cow::Borrowed(_)), "{s:?}");
            assert!(matches!(controls_only(s), Cow::Borrowed(_)), "{s:?}");
        }
    }

    #[test]
    fn controls_become_visible_escapes() {
        let table = [
            ("a\nkilled: x", "a\\nkilled: x"),
            ("\x1b[2J", "\\e[2J"),
            ("tab\there", "tab\\there"),
            ("cr\r", "cr\\r"),
            ("nul\0", "nul\\u{0}"),
            ("bell\x07", "bell\\u{7}"),
            ("del\x7f", "del\\u{7f}"),
            ("csi\u{9b}2J", "csi\\u{9b}2J"),
            ("c1 end\u{9f}", "c1 end\\u{9f}"),
            ("not c1\u{a0}", "not c1\u{a0}"),
        ];
        for (raw, want) in table {
            assert_eq!(escape_controls(raw), want, "{raw:?}");
            assert_eq!(controls_only(raw), want, "{raw:?}");
            assert!(!escape_controls(raw).chars().any(char::is_control), "{raw:?}");
        }
    }

    #[test]
    fn a_backslash_is_doubled_so_an_escape_is_never_ambiguous() {
        assert_eq!(escape_controls("a\\nb"), "a\\\\nb");
        assert_eq!(escape_controls("a\nb"), "a\\nb");
        assert_ne!(escape_controls("a\\nb"), escape_controls("a\nb"));
        // The sink's escape leaves backslashes: an escaped name is not escaped twice.
        assert_eq!(controls_only("a\\nb"), "a\\nb");
        assert_eq!(controls_only(&escape_controls("a\nb\x1b")), "a\\nb\\e");
    }

    #[test]
    fn a_rendered_text_keeps_its_lines_and_loses_its_other_controls() {
        assert_eq!(controls_but_newlines("a\nb\n"), "a\nb\n");
        assert_eq!(controls_but_newlines("name \x1b[2J\nnext\r\n"), "name \\e[2J\nnext\\r\n");
    }
}
