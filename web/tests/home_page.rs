//! The home page and the dashboard JSON from a fake source, through the router without a socket.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use std::sync::Arc;
use tower::ServiceExt;
use web::{
    BrakeNow, Dashboard, GroupNow, KillMarker, Marker, ProcSeries, ProcessStatus, Range, RecycleMarker, Series, Source,
};

struct Fake {
    names: Vec<String>,
    oom_kills: Option<u64>,
    brake: Option<BrakeNow>,
    held: Option<u64>,
    /// Kills at these seconds before now, of the last process.
    kills: Vec<u64>,
    /// Recycles at these seconds before now, of the second process.
    recycles: Vec<u64>,
    /// Listed processes that could not be sampled (their memory is the group's beyond the sampled: 100 MiB each).
    unsampled: usize,
    /// While aborting: the victim's requests in flight, as the agent lists them.
    victim: Option<web::view::VictimRequestsNow>,
}

impl Source for Fake {
    fn held_seconds(&self) -> Option<u64> {
        self.held
    }

    fn dashboard(&self, range: Range, buckets: usize) -> Dashboard {
        let n = buckets.min(range.seconds() as usize);
        let now_ms = 1_700_000_000_000;
        let step_ms = range.seconds() * 1000 / n as u64;
        let wave = |k: usize, scale: f64| -> Vec<f64> {
            (0..n).map(|i| if i < 5 { f64::NAN } else { scale * (1.0 + ((i + k * 7) as f64 / 20.0).sin()) }).collect()
        };
        let procs: Vec<ProcSeries> = self
            .names
            .iter()
            .enumerate()
            .map(|(k, name)| ProcSeries {
                name: name.clone(),
                role: if k == 0 { "master".into() } else { "worker".into() },
                rss_bytes: wave(k, 50e6),
                anon_bytes: wave(k, 30e6),
                requests_per_s: wave(k, 100.0),
                inflight: wave(k, 4.0),
                latency_p50_ms: wave(k, 2.0),
                latency_p99_ms: wave(k, 20.0),
                errors_5xx_per_s: wave(k, 0.5),
            })
            .collect();
        let state = (0..n)
            .map(|i| {
                if (n / 2..n / 2 + 10).contains(&i) {
                    1
                } else if i == n / 2 + 10 {
                    2
                } else {
                    0
                }
            })
            .collect();
        Dashboard {
            routes: Vec::new(),
            now_ms,
            range,
            group: GroupNow {
                cgroup: "/sys/fs/cgroup/memory/demo".into(),
                usage_bytes: 300 << 20,
                limit_bytes: 512 << 20,
                limit_source: "cgroup".into(),
                ratio: 300.0 / 512.0,
                state: "normal".into(),
                refuse_at: 0.85,
                abort_at: 0.92,
                shadow: false,
                probes: "on".into(),
                oom_kills: self.oom_kills,
                wakeups: vec!["thresholds".into()],
                wakeups_off: vec!["events: cgroup v2 only".into()],
                next_sample_ms: 20,
                brake: self.brake.clone(),
                processes_unsampled: self.unsampled,
                unattributed_bytes: (self.unsampled as u64 * 100) << 20,
                unseen: self.unsampled > 0,
                victim_requests: self.victim.clone(),
            },
            processes: self
                .names
                .iter()
                .enumerate()
                .map(|(k, name)| ProcessStatus {
                    name: name.clone(),
                    role: if k == 0 { "master".into() } else { "worker".into() },
                    pid: Some(100 + k as u32),
                    state: "serve".into(),
                    rss_bytes: 50 << 20,
                    anon_bytes: 30 << 20,
                    requests_total: 1234,
                    restarts: k as u64,
                    next_retry: None,
                })
                .collect(),
            series: Series {
                start_ms: now_ms - range.seconds() * 1000,
                step_ms,
                usage_bytes: wave(0, 150e6),
                limit_bytes: vec![512.0 * 1024.0 * 1024.0; n],
                state,
                shed_per_s: wave(1, 3.0),
                procs,
                restarts: vec![Marker {
                    t_ms: now_ms - range.seconds() * 500,
                    name: self.names[self.names.len() - 1].clone(),
                }],
                kills: self
                    .kills
                    .iter()
                    .map(|ago| KillMarker {
                        t_ms: now_ms - ago * 1000,
                        name: self.names[self.names.len() - 1].clone(),
                        pid: 103,
                        enforced: true,
                        error: None,
                    })
                    .collect(),
                recycles: self
                    .recycles
                    .iter()
                    .map(|ago| RecycleMarker {
                        t_ms: now_ms - ago * 1000,
                        name: self.names[1].clone(),
                        pid: 102,
                        reason: "it obeyed the abort 20.0 s ago but still holds its memory".into(),
                        signal: Some("TERM".into()),
                        enforced: true,
                        error: None,
                    })
                    .collect(),
                members: Vec::new(),
            },
            notes: vec!["history is not persisted: <locked>".into()],
            peers: Vec::new(),
            clock: false,
        }
    }
}

fn app(names: &[&str]) -> axum::Router {
    app_with(names, Some(0), None)
}

fn app_with(names: &[&str], oom_kills: Option<u64>, brake: Option<BrakeNow>) -> axum::Router {
    let names = names.iter().map(|s| s.to_string()).collect();
    web::router(Arc::new(Fake {
        names,
        oom_kills,
        brake,
        held: None,
        kills: Vec::new(),
        recycles: Vec::new(),
        unsampled: 0,
        victim: None,
    }))
}

/// The memory chart's SVG.
fn memory_chart(html: &str) -> &str {
    html.split("id=\"chart-memory\"").nth(1).and_then(|s| s.split("</svg>").next()).expect("the memory chart")
}

/// The contents of an SVG's `<text>` elements, trimmed.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            t.split_once('>').and_then(|(_, rest)| rest.split_once("</text>")).map(|(x, _)| x.trim().to_string())
        })
        .collect()
}

async fn get(app: axum::Router, uri: &str) -> (StatusCode, String) {
    let req = Request::builder().uri(uri).body(Body::empty()).expect("request");
    let resp = app.oneshot(req).await.expect("response");
    let status = resp.status();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn home_page_names_every_process_in_every_chart() {
    let names = ["master", "tx1", "tx2", "tx<3>"];
    for range in ["", "?range=5m", "?range=1h", "?range=24h", "?range=7d"] {
        let (status, html) = get(app(&names), &format!("/{range}")).await;
        assert_eq!(status, StatusCode::OK, "{range}");
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert_eq!(html.matches("<svg").count(), 5, "five charts for {range}");
        assert!(!html.contains("class=\"err\""), "a chart failed: {html}");
        assert!(!html.contains("http://") || !html.contains("<script src"), "no external resources");
        for chart in html.split("<svg").skip(1) {
            let texts = texts(chart);
            for name in &names[..3] {
                assert!(texts.iter().any(|t| t == name), "chart has no legend entry for {name}: {texts:?}");
            }
            assert!(texts.iter().any(|t| t == "tx&lt;3&gt;"), "names are escaped in the SVG");
        }
        // The stacked memory chart: one filled area per process (no gaps after the first buckets).
        let memory = html.split("id=\"chart-memory\"").nth(1).and_then(|s| s.split("</svg>").next()).expect("memory");
        // One filled area per process, plus the restart marker's triangle.
        assert_eq!(memory.matches("<polygon").count(), names.len() + 1, "one area per process in {range}");
        assert!(memory.contains("refuse 85%") && memory.contains("abort 92%"));
        assert!(!memory.contains("guard kill"), "no kill, no marker and no legend entry");
        assert!(!memory.contains("guard recycle") && !memory.contains("<title>"), "no recycle, no marker");
        assert!(html.contains("<td class=\"l\">tx&lt;3&gt;</td>"), "status strip escapes names");
        assert!(html.contains("history is not persisted: &lt;locked&gt;"));
    }
}

#[tokio::test]
async fn oom_kills_wakeups_and_the_brake_are_shown() {
    // No kill: the count is shown, with no banner; the armed and the off wake-ups; no brake.
    let (_, html) = get(app(&["a"]), "/").await;
    assert!(!html.contains("id=\"oom-kills\""), "no banner without a kill");
    assert!(html.contains("OOM kills <b>0</b>"), "{html}");
    assert!(html.contains("wake-ups <b id=\"wakeups\">thresholds</b> (off: events: cgroup v2 only)"));
    assert!(html.contains("next sample in 20 ms"));
    assert!(!html.contains("memory.high"), "no brake, no line");

    // Two kills and the brake set: a banner above everything else, and memory.high on the memory chart.
    let brake = BrakeNow { at: 0.96, high_bytes: Some(480 << 20), error: None };
    let (_, html) = get(app_with(&["a"], Some(2), Some(brake)), "/").await;
    let banner = html.find("id=\"oom-kills\"").expect("a banner");
    assert!(banner < html.find("<nav>").unwrap_or(0), "the banner comes before the charts");
    assert!(html.contains("has killed 2 processes of this group"), "{html}");
    assert!(html.contains("brake: memory.high <b id=\"brake\">480.0 MiB</b> (96% of the limit)"));
    let memory = memory_chart(&html);
    assert!(texts(memory).iter().any(|t| t == "memory.high 480 MiB"), "legend: {:?}", texts(memory));
    assert!(memory.contains("stroke=\"#8000A0\""), "the brake's line is drawn");

    // A brake that could not be set says why; a kernel without the count says so.
    let failed = BrakeNow { at: 0.96, high_bytes: None, error: Some("memory.high: <denied>".into()) };
    let (_, html) = get(app_with(&["a"], None, Some(failed)), "/").await;
    assert!(html.contains("OOM kills <b>not counted by this kernel</b>"));
    assert!(html.contains("not set: memory.high: &lt;denied&gt;"), "{html}");
    assert!(!memory_chart(&html).contains("#8000A0"));
}

#[tokio::test]
async fn memory_beyond_the_sampled_processes_is_shown() {
    let (_, html) = get(app(&["a"]), "/").await;
    assert!(html.contains("beyond the sampled processes <b id=\"unattributed\">0.0 MiB</b>"), "{html}");
    assert!(!html.contains("id=\"unsampled\"") && !html.contains("id=\"unseen\""));
    // Three listed processes could not be sampled and hold the memory over the line: said in red, and a banner.
    let fake = Fake {
        names: vec!["a".into()],
        oom_kills: Some(0),
        brake: None,
        held: None,
        kills: Vec::new(),
        recycles: Vec::new(),
        unsampled: 3,
        victim: None,
    };
    let (_, html) = get(web::router(Arc::new(fake)), "/").await;
    assert!(
        html.contains(
            "<b id=\"unattributed\">300.0 MiB</b> (<span class=\"err\" id=\"unsampled\">3 not sampled</span>)"
        ),
        "{html}"
    );
    let banner = html.find("id=\"unseen\"").expect("a banner");
    assert!(banner < html.find("<nav>").unwrap_or(0), "the banner comes before the charts");
}

#[tokio::test]
async fn the_victims_requests_are_listed_escaped() {
    let victim = web::view::VictimRequestsNow {
        pid: 4242,
        summary: "2 requests in flight, the oldest GET /<heavy> for 3.0 s".into(),
        lines: vec!["GET /<heavy> 3.0 s (in 0 B, out 0 B)".into(), "GET /light 0.1 s (in 0 B, out 0 B)".into()],
    };
    let fake = Fake {
        names: vec!["a".into()],
        oom_kills: None,
        brake: None,
        held: None,
        kills: Vec::new(),
        recycles: Vec::new(),
        unsampled: 0,
        victim: Some(victim),
    };
    let (_, html) = get(web::router(Arc::new(fake)), "/").await;
    let at = html.find("id=\"victim-requests\"").expect("the victim's requests");
    assert!(at < html.find("<nav>").unwrap_or(0), "before the charts");
    assert!(html.contains("pid 4242, with 2 requests in flight, the oldest GET /&lt;heavy&gt; for 3.0 s"), "{html}");
    assert!(html.contains("<li>GET /&lt;heavy&gt; 3.0 s (in 0 B, out 0 B)</li><li>GET /light"), "{html}");
    let (_, html) = get(app(&["a"]), "/").await;
    assert!(!html.contains("victim-requests"), "none while no abort");
}

#[tokio::test]
async fn the_page_opens_on_the_span_the_data_fills_and_refreshes_in_place() {
    let opened = |held: Option<u64>| async move {
        let fake = Fake {
            names: vec!["a".into()],
            oom_kills: None,
            brake: None,
            held,
            kills: Vec::new(),
            recycles: Vec::new(),
            unsampled: 0,
            victim: None,
        };
        let (_, html) = get(web::router(Arc::new(fake)), "/").await;
        let on = html.split("<a class=\"on\" href=\"").nth(1).and_then(|a| a.split_once("\">")?.1.split('<').next());
        let showing = html.split("<span id=\"range\">showing ").nth(1).and_then(|s| s.split('<').next());
        (on.map(String::from), showing.map(String::from))
    };
    let opened_on = |on: &str, words: &str| (Some(on.to_string()), Some(words.to_string()));
    assert_eq!(opened(Some(40)).await, opened_on("1m", "the last minute"), "a fresh agent");
    assert_eq!(opened(Some(12 * 60 + 5)).await, opened_on("12m", "the last 12 minutes"), "the data fills the page");
    assert_eq!(opened(Some(2 * 3600)).await, opened_on("120m", "the last 2 hours"));
    assert_eq!(opened(Some(30 * 86_400)).await, opened_on("24h", "the last 24 hours"), "a day at most");
    assert_eq!(opened(None).await, opened_on("1h", "the last hour"), "a source that does not say");
    assert_eq!(Range::parse("12m"), Some(Range::Minutes(12)));
    assert_eq!((Range::parse("0m"), Range::parse("1441m"), Range::parse("x")), (None, None, None));
    assert_eq!(serde_json::to_string(&Range::Minutes(12)).ok().as_deref(), Some("\"12m\""));
    let (_, html) = get(app(&["a"]), "/").await;
    assert!(!html.contains("location.reload") && html.contains("replaceWith"), "refreshed in place");
}

#[tokio::test]
async fn a_kill_of_the_guard_is_marked_on_the_memory_chart_only() {
    let fake = Fake {
        names: vec!["a".into(), "tx<3>".into()],
        oom_kills: None,
        brake: None,
        held: None,
        kills: vec![90],
        recycles: Vec::new(),
        unsampled: 0,
        victim: None,
    };
    let (status, html) = get(web::router(Arc::new(fake)), "/?range=5m").await;
    assert_eq!(status, StatusCode::OK);
    let memory = texts(memory_chart(&html));
    assert!(memory.iter().any(|t| t == "guard kill"), "{memory:?}");
    assert_eq!(memory.iter().filter(|t| *t == "tx&lt;3&gt;").count(), 2, "the legend and the kill's label: {memory:?}");
    let others = html.split("id=\"chart-requests\"").nth(1).expect("the other charts");
    assert!(!others.contains("guard kill"));
}

#[tokio::test]
async fn a_recycle_of_the_guard_is_marked_apart_from_its_kills_on_the_memory_chart_only() {
    let fake = || Fake {
        names: vec!["a".into(), "tx<1>".into(), "tx2".into()],
        oom_kills: None,
        brake: None,
        held: None,
        kills: vec![90],
        recycles: vec![200],
        unsampled: 0,
        victim: None,
    };
    let (status, html) = get(web::router(Arc::new(fake())), "/?range=5m").await;
    assert_eq!(status, StatusCode::OK);
    let memory = memory_chart(&html);
    let texts = texts(memory);
    assert!(texts.iter().any(|t| t == "guard recycle") && texts.iter().any(|t| t == "guard kill"), "{texts:?}");
    assert!(texts.iter().any(|t| t == "tx&lt;1&gt; recycled"), "the recycle's label: {texts:?}");
    assert!(texts.iter().any(|t| t == "tx2"), "the kill's label, without recycled: {texts:?}");
    let title = memory.split_once("<title>").and_then(|(_, t)| t.split_once("</title>")).map(|(t, _)| t);
    assert_eq!(
        title,
        Some("tx&lt;1&gt; (pid 102) recycled with SIGTERM: it obeyed the abort 20.0 s ago but still holds its memory"),
        "its name, recycled, and why"
    );
    let others = html.split("id=\"chart-requests\"").nth(1).expect("the other charts");
    assert!(!others.contains("guard recycle") && !others.contains("<title>"));
    let (_, json) = get(web::router(Arc::new(fake())), "/api/v1/dashboard?range=5m").await;
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    let r = &v["series"]["recycles"][0];
    assert_eq!((r["name"].as_str(), r["signal"].as_str(), r["pid"].as_u64()), (Some("tx<1>"), Some("TERM"), Some(102)));
    assert_eq!(v["series"]["kills"][0]["name"], "tx2", "apart from the kills");
}

#[tokio::test]
async fn range_links_and_bad_range() {
    let (_, html) = get(app(&["a"]), "/?range=24h").await;
    assert!(html.contains("<a class=\"on\" href=\"/?range=24h\">24h</a>"));
    for r in ["5m", "1h", "7d"] {
        assert!(html.contains(&format!("href=\"/?range={r}\"")));
    }
    let (status, body) = get(app(&["a"]), "/?range=2y").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("unknown range \"2y\""));
}

#[tokio::test]
async fn dashboard_json_is_downsampled_to_the_plot_width() {
    let (status, body) = get(app(&["a", "b"]), "/api/v1/dashboard?range=1h").await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let n = v["series"]["usage_bytes"].as_array().map(|a| a.len()).unwrap_or(0);
    assert!(n > 0 && n <= web::chart::PLOT_WIDTH, "{n} buckets");
    assert_eq!(v["series"]["procs"][1]["name"], "b");
}

#[tokio::test]
async fn an_empty_group_still_renders() {
    struct Empty;
    impl Source for Empty {
        fn dashboard(&self, range: Range, _: usize) -> Dashboard {
            Dashboard { range, now_ms: 1000, ..Dashboard::default() }
        }
    }
    let (status, html) = get(web::router(Arc::new(Empty)), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(html.matches("<svg").count(), 5);
    assert!(html.contains("no processes in the group"));
}

/// Not a test: writes the 1 h page for four processes, one OOM kill, three kills and a recycle of the guard and the
/// brake set, to
/// /tmp/home.html to look at (`cargo test -p web --test home_page dump -- --ignored`).
#[tokio::test]
#[ignore = "tool, not a test: writes the page to /tmp/home.html to look at"]
async fn dump() {
    let brake = BrakeNow { at: 0.96, high_bytes: Some(503_316_480), error: None };
    let names = ["master", "tx1", "tx2", "tx<3>"].map(String::from).to_vec();
    let fake = Fake {
        names,
        oom_kills: Some(1),
        brake: Some(brake),
        held: None,
        kills: vec![600, 620, 1500],
        recycles: vec![900],
        unsampled: 0,
        victim: None,
    };
    let (_, html) = get(web::router(Arc::new(fake)), "/?range=1h").await;
    std::fs::write("/tmp/home.html", html).expect("write");
}
