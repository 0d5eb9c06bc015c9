//! `monitor report --png` on a stats database: the day's charts written as a PNG, the line that says so on stderr,
//! and the JSON on stdout untouched.

use monitor::commands::report::png::{FONT_PATHS, HEIGHT, WIDTH};
use monitor::history::ring::{Labels, Minute, ProcMinute};
use monitor::history::store::Store;
use monitor_tests::run_monitor;
use std::time::Duration;

#[test]
fn report_png_draws_the_day_with_its_text() {
    let test = "report_png_draws_the_day_with_its_text";
    let dir = monitor_tests::temp_dir("cli-report-png");
    let (db, png) = (dir.join("stats.db"), dir.join("day.png"));
    let day = 1_709_251_200; // 2024-03-01
    {
        let mut store = Store::open(&db).unwrap_or_else(|e| panic!("{}: {e}", db.display()));
        let mut labels = Labels::default();
        let label = labels.intern("app-w01", "worker");
        for i in 0..120 {
            let procs = vec![ProcMinute { label, rss_max: (100 + i) << 20, requests: 60, ..ProcMinute::default() }];
            let m = Minute { t: day + i * 60, usage_max: 200 << 20, limit: 1 << 30, procs, ..Minute::default() };
            store.insert(&m, &labels).unwrap_or_else(|e| panic!("minute {i}: {e}"));
        }
    }
    let (db_arg, png_arg) = (db.display().to_string(), png.display().to_string());
    let args = ["report", "--db", &db_arg, "--date", "2024-03-01", "--json", "--png", &png_arg];
    let out = run_monitor(&args, Duration::from_secs(60));
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(json["requests_total"], 7200);
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{png_arg}: {e}"));
    assert_eq!(bytes.get(..8), Some(&b"\x89PNG\r\n\x1a\n"[..]), "a PNG");
    // The IHDR chunk: width and height, big-endian, from byte 16.
    let size = |at: usize| bytes.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    assert_eq!((size(16), size(20)), (Some(WIDTH), Some(HEIGHT)));
    let said = format!("wrote {png_arg} ({WIDTH}×{HEIGHT} PNG");
    assert!(out.stderr.starts_with(&said), "{}", out.stderr);
    let font = FONT_PATHS.iter().find(|p| std::path::Path::new(p).is_file());
    if monitor_tests::require(font.is_some(), test, "no font (apt-get install fonts-dejavu-core)") {
        assert!(out.stderr.contains("text in /usr/share/fonts/"), "{}", out.stderr);
    } else {
        assert!(out.stderr.contains("without text: no font found"), "{}", out.stderr);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
