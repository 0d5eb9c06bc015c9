//! The agent's log: `tracing` events on stderr, filtered by `MONITOR_LOG` (default `info`). Under systemd, when
//! stderr is the journal (`JOURNAL_STREAM` names it), each line starts with its syslog priority (`<4>` for a
//! warning) and carries no timestamp or colour of its own: journald keeps the priority (`journalctl -p warning`
//! finds it) and stamps the time itself.

use std::fmt;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Installs the log for this process.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MONITOR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if stderr_is_the_journal() {
        builder.with_ansi(false).event_format(Journal).init();
    } else {
        use std::io::IsTerminal;
        builder.with_ansi(std::io::stderr().is_terminal()).init();
    }
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
                "<3>monitor::logs::tests: e",
                "<4>monitor::logs::tests: w pid=7",
                "<6>monitor::logs::tests: i",
                "<7>monitor::logs::tests: d"
            ]
        );
    }

    #[test]
    fn the_journal_is_found_by_device_and_inode() {
        assert_eq!(parse_stream("8:12345"), Some((8, 12345)));
        assert_eq!(parse_stream("8"), None);
        assert_eq!(parse_stream("x:1"), None);
    }
}
