//! The agent's log: `tracing` events on stderr, filtered by `MONITOR_LOG` (default `info`; an invalid value is an
//! error naming it). Two formats (`--log-format`):
//! - `text`: one line per event. Under systemd, when stderr is the journal (`JOURNAL_STREAM` names it), each line
//!   starts with its syslog priority (`<4>` for a warning) and carries no timestamp or colour of its own: journald
//!   keeps the priority (`journalctl -p warning` finds it) and stamps the time itself. Every field, the message
//!   among them, has its control characters escaped ([`crate::base::text::controls_only`]): a process name or a
//!   request path cannot break a line in two or send the terminal an escape sequence.
//! - `json`: one JSON object per line (`timestamp`, `level`, `target`, `message` and the event's fields), for
//!   container log collectors.

use std::fmt;
use std::str::FromStr;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::filter::{Directive, EnvFilter, LevelFilter};
use tracing_subscriber::fmt::format::{DefaultFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The environment variable that filters the log.
pub(crate) const ENV: &str = "MONITOR_LOG";
/// The filter when `MONITOR_LOG` is unset or empty.
const DEFAULT_FILTER: &str = "info";

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Plain lines (with a syslog priority prefix when stderr is the journal).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Why the log could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// `MONITOR_LOG` holds a directive tracing cannot read.
    #[error("{ENV}: invalid directive `{directive}`: {reason}")]
    BadDirective { directive: String, reason: String },
    /// `MONITOR_LOG` is not valid UTF-8.
    #[error("{ENV}: not valid UTF-8")]
    NotUnicode,
}

/// Installs the log for this process, in `format`, filtered by `MONITOR_LOG`.
pub fn init(format: LogFormat) -> Result<(), LogError> {
    let value = match std::env::var(ENV) {
        Ok(v) => v,
        Err(std::env::VarError::NotPresent) => String::new(),
        Err(std::env::VarError::NotUnicode(_)) => return Err(LogError::NotUnicode),
    };
    let filter = parse_filter(&value)?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).init(),
        LogFormat::Text if stderr_is_the_journal() => {
            builder.with_ansi(false).fmt_fields(Escaped::default()).event_format(Journal).init()
        }
        LogFormat::Text => {
            use std::io::IsTerminal;
            builder.with_ansi(std::io::stderr().is_terminal()).fmt_fields(Escaped::default()).init();
        }
    }
    Ok(())
}

/// The filter a `MONITOR_LOG` value says (`info` when empty); the first directive tracing cannot read is the error.
pub(crate) fn parse_filter(value: &str) -> Result<EnvFilter, LogError> {
    let value = value.trim();
    let value = if value.is_empty() { DEFAULT_FILTER } else { value };
    let mut filter = EnvFilter::default();
    for d in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bad = |reason: String| LogError::BadDirective { directive: d.to_string(), reason };
        // tracing reads a lone word that is not a level as a target traced at every level, which turns a typo
        // (`warning`, `verbose`) into a log with nothing else in it; a target alone must say its level.
        if is_lone_word(d) && LevelFilter::from_str(d).is_err() {
            return Err(bad("not a level (off, error, warn, info, debug, trace); a target needs its level, as in \
                            `monitor=debug`"
                .into()));
        }
        filter = filter.add_directive(Directive::from_str(d).map_err(|e| bad(e.to_string()))?);
    }
    Ok(filter)
}

/// A directive with no `=`, span filter or module path: a level, or a target alone.
fn is_lone_word(d: &str) -> bool {
    !d.contains(['=', '[', ':'])
}

/// Whether stderr is the stream systemd connected to the journal: `JOURNAL_STREAM` holds its `device:inode`.
fn stderr_is_the_journal() -> bool {
    let Some(want) = std::env::var("JOURNAL_STREAM").ok().and_then(|v| parse_stream(&v)) else { return false };
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st`, a stat struct we own.
    let rc = unsafe { libc::fstat(libc::STDERR_FILENO, &mut st) };
    rc == 0 && (st.st_dev as u64, st.st_ino as u64) == want
}

fn parse_stream(v: &str) -> Option<(u64, u64)> {
    let (dev, ino) = v.split_once(':')?;
    Some((dev.parse().ok()?, ino.parse().ok()?))
}

/// The syslog priority of a level: error 3, warning 4, info 6, debug and trace 7.
fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// The text log's fields as tracing writes them, with their control characters escaped (JSON escapes its own).
#[derive(Default)]
struct Escaped(DefaultFields);

impl<'w> FormatFields<'w> for Escaped {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut raw = String::new();
        self.0.format_fields(Writer::new(&mut raw), fields)?;
        writer.write_str(&crate::base::text::controls_only(&raw))
    }
}

/// `<priority>target: message field=value…`, one line per event.
struct Journal;

impl<S, N> FormatEvent<S, N> for Journal
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        write!(writer, "<{}>{}: ", priority(meta.level()), meta.target())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn each_line_starts_with_its_syslog_priority() {
        let out = Lines::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .event_format(Journal)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!("e");
            tracing::warn!(pid = 7, "w");
            tracing::info!("i");
            tracing::debug!("d");
        });
        let text = String::from_utf8(out.0.lock().map(|v| v.clone()).unwrap_or_default()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "<3>monitor::base::logs::tests: e",
                "<4>monitor::base::logs::tests: w pid=7",
                "<6>monitor::base::logs::tests: i",
                "<7>monitor::base::logs::tests: d"
            ]
        );
    }

    /// The lines `format` writes for one warning with a field, at `filter`.
    fn lines(filter: &str, json: bool) -> Vec<String> {
        let out = Lines::default();
        let sink = out.clone();
        let filter = parse_filter(filter).unwrap_or_else(|e| panic!("{e}"));
        let builder =
            tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_writer(move || sink.clone());
        let emit = || {
            tracing::warn!(pid = 7, "group unreadable");
            tracing::debug!("d");
        };
        if json {
            tracing::subscriber::with_default(
                builder.json().flatten_event(true).with_current_span(false).finish(),
                emit,
            );
        } else {
            tracing::subscriber::with_default(builder.finish(), emit);
        }
        let text = String::from_utf8(out.0.lock().map(|v| v.clone()).unwrap_or_default()).unwrap_or_default();
        text.lines().map(String::from).collect()
    }

    #[test]
    fn json_is_one_object_per_line_with_level_target_message_and_fields() {
        let got = lines("info", true);
        assert_eq!(got.len(), 1, "{got:?}");
        let v: serde_json::Value = serde_json::from_str(&got[0]).unwrap_or_else(|e| panic!("{e}: {}", got[0]));
        assert_eq!(v["level"], "WARN", "{v}");
        assert_eq!(v["target"], "monitor::base::logs::tests", "{v}");
        assert_eq!(v["message"], "group unreadable", "{v}");
        assert_eq!(v["pid"], 7, "{v}");
        assert!(v["timestamp"].is_string(), "{v}");
    }

    #[test]
    fn the_filter_reads_levels_and_targets() {
        assert_eq!(lines("", false).len(), 1, "empty is info");
        assert_eq!(lines("debug", false).len(), 2);
        assert_eq!(lines("warn,monitor::base::logs=debug", false).len(), 2);
        assert_eq!(lines("error", false).len(), 0);
        assert_eq!(lines("monitor::sampler=debug", false).len(), 0, "only the sampler's debug");
    }

    #[test]
    fn a_bad_directive_is_an_error_naming_the_variable_and_the_directive() {
        for (value, bad) in [
            ("warning", "warning"),
            ("info,verbose", "verbose"),
            ("monitor=loud", "monitor=loud"),
            ("info, monitor::sampler=lots", "monitor::sampler=lots"),
        ] {
            let e = parse_filter(value).err().unwrap_or_else(|| panic!("{value:?} accepted"));
            let text = e.to_string();
            assert!(text.starts_with("MONITOR_LOG: "), "{text}");
            assert!(text.contains(&format!("`{bad}`")), "{value:?}: {text}");
        }
        for good in ["info", "WARN", "off", "monitor=trace", "info,monitor::front::proxy=debug", " debug "] {
            assert!(parse_filter(good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn a_field_or_message_cannot_break_its_line_or_send_an_escape() {
        let out = Lines::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .fmt_fields(Escaped::default())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let name = "a\nkilled: x";
            tracing::warn!(name = %name, "killed: {}", "\x1b[2Jb\nkilled: y");
        });
        let text = String::from_utf8(out.0.lock().map(|v| v.clone()).unwrap_or_default()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "one event, one line: {text:?}");
        assert!(!text.contains('\x1b'), "{text:?}");
        // tracing writes the ESC as `\x1b` itself; the newlines are ours to escape.
        assert!(lines[0].ends_with("killed: \\x1b[2Jb\\nkilled: y name=a\\nkilled: x"), "{text:?}");
    }

    #[test]
    fn the_journal_is_found_by_device_and_inode() {
        assert_eq!(parse_stream("8:12345"), Some((8, 12345)));
        assert_eq!(parse_stream("8"), None);
        assert_eq!(parse_stream("x:1"), None);
    }
}
