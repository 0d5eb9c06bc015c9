//! The front door reads a request's path every way its process may: here the processes are real Jetty 9.4
//! (tests/fixtures/jetty/Backend.java), which cuts `;` parameters, decodes escapes and resolves dot segments before
//! it picks a servlet. Every spelling of a process's admin path and of `[actions] post_url`'s path gets 403 and
//! reaches no process; while the group refuses, no request dressed as a health path reaches a process either: each
//! gets the guard's 503 (or the channel's 403). Each shape is first sent straight to a process, to show what Jetty
//! makes of it.

use monitor_tests::agent::free_port;
use monitor_tests::config::Config;
use monitor_tests::http::{self, Response};
use monitor_tests::run::{Run, Spec, TIMEOUT};
use monitor_tests::{require, require_group, require_program};
use std::net::SocketAddr;
use std::path::Path;

/// The jars Backend.java needs, as Debian's libjetty9-java and libservlet-api-java install them.
const JARS: &[&str] =
    &["jetty9-server", "jetty9-servlet", "jetty9-http", "jetty9-io", "jetty9-util", "jetty9-security", "servlet-api"];

fn classpath() -> Option<String> {
    let jars: Vec<String> = JARS.iter().map(|j| format!("/usr/share/java/{j}.jar")).collect();
    jars.iter().all(|j| Path::new(j).exists()).then(|| jars.join(":"))
}

/// Spellings of the admin path (on tx1) and of post_url's path (on m0), each with what Jetty reads it as when sent
/// straight to the process: `Some("heard")` when its admin servlet takes it, None when Jetty serves something else
/// (or refuses it), which some other server may still read as the admin path.
const CHANNEL: &[(&str, Option<&str>)] = &[
    ("/admin/memory", Some("heard")),
    ("/admin/memory;x", Some("heard")),
    ("/admin;x/memory", Some("heard")),
    ("/admin/memory;jsessionid=1/", Some("heard")),
    // Jetty 9.4 refuses `..;` as ambiguous (400); Tomcat reads it as `..`.
    ("/admin/x/..;/memory", None),
    ("/admin/%6Demory", Some("heard")),
    ("/admin/./memory", Some("heard")),
    ("/x/../admin/memory", Some("heard")),
    ("/admin/%256Demory", None),
    ("/ADMIN/Memory", None),
    ("//admin//memory", None),
    ("/admin%3Bx/memory", None),
    ("/admin/relay", Some("heard")),
    ("/admin/relay;x", Some("heard")),
    ("/admin;x/relay", Some("heard")),
    ("/admin/relay;jsessionid=1/", Some("heard")),
    ("/Admin/Relay", None),
];

/// Requests dressed as exempt paths while the group refuses: the answer through the front door, and what Jetty
/// reads each as when sent straight to a process (None: not checked straight).
const DRESSED: &[(&str, u16, Option<&str>)] = &[
    ("/health;x/../r4/heavy", 503, Some("/r4/heavy")),
    ("/health/../r4/heavy", 503, Some("/r4/heavy")),
    ("/health/..;/r4/heavy", 503, None),
    ("/health/%2e%2e/r4/heavy", 503, None),
    ("/healthx", 503, Some("/healthx")),
    ("/HEALTH", 503, Some("/HEALTH")),
    ("/admin/memoryx/../../r4/heavy", 503, Some("/r4/heavy")),
    ("/admin/memory/../../r4/heavy", 403, Some("/r4/heavy")),
    ("/r4/heavy", 503, Some("/r4/heavy")),
];

fn send(addr: SocketAddr, method: &str, path: &str) -> Response {
    let r = match method {
        "POST" => http::request_body(addr, method, path, &[("Content-Type", "application/json")], b"{}", TIMEOUT),
        _ => http::request(addr, method, path, &[], TIMEOUT),
    };
    r.unwrap_or_else(|e| panic!("{method} {path} to {addr}: {e}"))
}

/// What process `i` heard from clients (not the agent's own POSTs, which carry its proof).
fn heard(run: &Run, i: usize) -> Vec<String> {
    let r = run.direct(i, "/record");
    assert_eq!(r.status, 200, "{}", r.text());
    r.text().lines().filter(|l| !l.starts_with("post agent ")).map(str::to_string).collect()
}

#[test]
fn no_spelling_of_a_guarded_path_reaches_a_servlet_container() {
    let test = "no_spelling_of_a_guarded_path_reaches_a_servlet_container";
    if !require_group(test) || !require_program(test, "java") {
        return;
    }
    let cp = classpath();
    if !require(cp.is_some(), test, "needs Jetty 9 (apt-get install libjetty9-java)") {
        return;
    }
    let backend = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/jetty/Backend.java");
    let m0_port = free_port();
    let spec = Spec {
        workers: 1,
        limit_mib: 1024,
        master_port: Some(m0_port),
        start_timeout_s: 90,
        command: [
            "java",
            "-Xmx48m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            &cp.unwrap_or_default(),
            &backend.display().to_string(),
            "--name={name}",
            "--port={port}",
        ]
        .map(String::from)
        .to_vec(),
        process: "admin_path = \"/admin/memory\"\n".into(),
        // The group refuses as soon as its two JVMs hold 5% of 1 GiB; nothing is aborted or killed.
        policy: "refuse_at = 0.05\nhysteresis = 0.01\nabort_at = 0.98\nkill_at = 0.99\nkill = false".into(),
        extra: Config::new().set("actions", "post_url", format!("http://127.0.0.1:{m0_port}/admin/relay")),
        // How a path is read has nothing to do with the memory hierarchy, and the VM's image carries no JVM.
        host_only: true,
        ..Spec::default()
    };
    let run = Run::start("run-paths", &spec);
    run.wait_for("refusing", |s| s.pointer("/policy/state").and_then(|v| v.as_str()) == Some("refusing"), TIMEOUT);
    let tx1 = SocketAddr::from(([127, 0, 0, 1], run.ports[1]));
    let m0 = SocketAddr::from(([127, 0, 0, 1], run.ports[0]));

    // What Jetty makes of each shape, straight from a client: these are the readings the front door must share.
    let mut unlike = Vec::new();
    for (path, jetty) in CHANNEL {
        let at = if path.to_ascii_lowercase().contains("relay") { m0 } else { tx1 };
        let r = send(at, "POST", path);
        if jetty.is_some_and(|want| (r.status, r.text().trim()) != (200, want)) {
            unlike.push(format!("POST {path}: {} {}", r.status, r.text().trim()));
        }
    }
    for (path, _, jetty) in DRESSED {
        let r = send(tx1, "GET", path);
        if jetty.is_some_and(|want| (r.status, r.text().trim()) != (200, want)) {
            unlike.push(format!("GET {path}: {} {}", r.status, r.text().trim()));
        }
    }
    assert!(unlike.is_empty(), "straight to Jetty, not as the table says:\n{}", unlike.join("\n"));
    let before = (heard(&run, 0), heard(&run, 1));

    // Through the front door: the health path itself passes; nothing else does.
    let r = run.get("/health", &[]);
    assert_eq!((r.status, r.text().trim()), (200, "ok"), "the health path is exempt");
    for (path, _) in CHANNEL {
        let r = send(run.proxy, "POST", path);
        assert_eq!(r.status, 403, "POST {path}: {}", r.text());
    }
    for (path, status, _) in DRESSED {
        let r = send(run.proxy, "GET", path);
        assert_eq!(r.status, *status, "GET {path}: {}", r.text());
        if *status == 503 {
            assert!(r.text().starts_with("memory guard:"), "GET {path}: {}", r.text());
        }
    }
    let after = (heard(&run, 0), heard(&run, 1));
    assert_eq!(after, before, "a process heard a request through the front door");
}
