//! The proof on the agent's action POSTs (`X-Monitor-Proof`, monitor/src/base/proof.rs) under `monitor run`: each
//! process it starts finds the group's secret in `MONITOR_ACTION_SECRET`, and the fixture backend acts only on
//! POSTs that prove themselves with it, on its admin endpoint and as the master relaying `post_url`. One real POST
//! of the agent's, captured by the process that got it and sent to it again byte for byte, is refused (replayed);
//! so are its body with one byte changed under the same proof, the body with no proof, and a proof made with the
//! real secret a minute ago; and none of them changes what the process was told. A proof is good at one process
//! only: tx1's POST sent to its sibling tx2 within the window is refused there, whatever `Host` it names, and so is
//! a POST proven for tx2 that is about tx1. The Python check that docs/deploy.md gives server authors agrees with
//! monitor's proofs, case by case.

use monitor::base::proof::{Key, HEADER, SECRET_ENV, WINDOW_MS};
use monitor_tests::run::{member, Run, Spec, TIMEOUT};
use monitor_tests::{agent::free_port, require_group, require_program, Hog};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");

fn state(s: &Value) -> &str {
    s.pointer("/policy/state").and_then(Value::as_str).unwrap_or("?")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// Polls `/stats` of process `i` until `pred` holds; panics with the last one after [`TIMEOUT`].
fn wait_stats(run: &Run, i: usize, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let s = run.stats(i);
        if pred(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "process {i}: {what}: not within {TIMEOUT:?}: {s:#}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// POSTs `body` with `proof` (if any) straight to process `i`'s port, at `target`; the status it answers.
fn post_direct(run: &Run, i: usize, target: &str, proof: Option<&str>, body: &[u8]) -> u16 {
    let addr = SocketAddr::from(([127, 0, 0, 1], run.ports[i]));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(p) = proof {
        headers.push((HEADER, p));
    }
    let r = monitor_tests::http::request_body(addr, "POST", target, &headers, body, TIMEOUT)
        .unwrap_or_else(|e| panic!("POST {target} to process {i}: {e}"));
    r.status
}

/// POSTs `body` with `proof` to process `i`'s port at `target` as a raw request whose `Host` header is `host`,
/// whatever port it really goes to; the status it answers.
fn post_as_host(run: &Run, i: usize, host: &str, target: &str, proof: &str, body: &[u8]) -> u16 {
    let addr = SocketAddr::from(([127, 0, 0, 1], run.ports[i]));
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
    let head = format!(
        "POST {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         {HEADER}: {proof}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(&[head.as_bytes(), body].concat()).unwrap_or_else(|e| panic!("send to {addr}: {e}"));
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap_or_else(|e| panic!("read from {addr}: {e}"));
    monitor_tests::http::parse_response(&raw).unwrap_or_else(|e| panic!("answer of {addr}: {e}")).status
}

/// The secret `monitor run` handed process `pid`, read from its environment (root reads any process's).
fn handed_secret(pid: u64) -> Vec<u8> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_else(|e| panic!("environ of {pid}: {e}"));
    let prefix = format!("{SECRET_ENV}=");
    let hex = env
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
        .unwrap_or_else(|| panic!("process {pid} was not handed {SECRET_ENV}"));
    let hex = std::str::from_utf8(hex).unwrap_or_else(|e| panic!("{SECRET_ENV}: {e}"));
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or_else(|e| panic!("{SECRET_ENV}: {e}")))
        .collect()
}

#[test]
fn processes_act_only_on_the_agents_proven_posts() {
    if !require_group("processes_act_only_on_the_agents_proven_posts") {
        return;
    }
    let master_port = free_port();
    let spec = Spec {
        workers: 1,
        limit_mib: 256,
        master_port: Some(master_port),
        process: "admin_path = \"/admin/memory\"\n".into(),
        // The master relays: every change is POSTed to it as well, with its own proof.
        extra: monitor_tests::config::Config::new().set(
            "actions",
            "post_url",
            format!("http://127.0.0.1:{master_port}/admin/relay"),
        ),
        ..Spec::default()
    };
    let run = Run::start("proof", &spec);
    assert_eq!(run.stats(1)["proof"], "checked", "the worker was not handed the secret");
    assert_eq!(run.stats(0)["proof"], "checked", "the master was not handed the secret");

    // 88% of 256 MiB: every process refuses, and each is told on its admin endpoint, the master as relay too.
    let mut hog = Hog::spawn(HOG, run.cg.path(), 224, false);
    run.wait_for("refusing", |s| state(s) == "refusing", TIMEOUT);
    let tx1 = wait_stats(&run, 1, "told to refuse", |s| strings(&s["admin"]) == ["refuse"]);
    let tx1_pid = member(&run.status(), "tx1")["pid"].as_u64().expect("tx1 pid");
    wait_stats(&run, 0, "relayed tx1's refusal", |s| {
        s["relay"].as_array().is_some_and(|r| r.iter().any(|c| c["pid"] == tx1_pid && c["action"] == "refuse"))
    });
    assert_eq!(strings(&tx1["rejected"]), Vec::<String>::new(), "the agent's own POSTs were refused: {tx1:#}");

    // The agent's POST as tx1 received it.
    let log = tx1["admin_log"].as_array().cloned().unwrap_or_default();
    assert_eq!(log.len(), 1, "{tx1:#}");
    let got = &log[0];
    let (target, body) = (got["target"].as_str().expect("target"), got["body"].as_str().expect("body"));
    let proof = got["proof"].as_str().unwrap_or_else(|| panic!("the agent's POST carried no {HEADER}: {got:#}"));
    assert_eq!((target, got["verdict"].as_str()), ("/admin/memory", Some("accepted")), "{got:#}");
    assert!(proof.starts_with("t=") && proof.contains(",n=") && proof.contains(",mac="), "{proof}");

    // Sent again byte for byte: a replay. One byte of the body changed under the same proof: the mac fails. The
    // body alone: no proof. A proof made with the real secret a minute ago: stale.
    assert_eq!(post_direct(&run, 1, target, Some(proof), body.as_bytes()), 401, "a replay was taken");
    let pid_at = body.find("\"pid\":").expect("a pid") + "\"pid\":".len();
    let mut altered = body.as_bytes().to_vec();
    altered[pid_at] = if altered[pid_at] == b'1' { b'2' } else { b'1' };
    assert_eq!(post_direct(&run, 1, target, Some(proof), &altered), 401, "an altered body was taken");
    let abort = body.replace("\"refuse\"", "\"abort\"");
    assert_eq!(post_direct(&run, 1, target, None, abort.as_bytes()), 401, "a POST without proof was taken");
    let key = Key::new(&handed_secret(tx1_pid)).expect("a secret of 32 bytes or more");
    let minute_ago = monitor::base::proof::now_ms() - 60_000;
    let tx1_at = format!("127.0.0.1:{}", run.ports[1]);
    let old = key.sign_at("POST", &tx1_at, target, abort.as_bytes(), minute_ago, &[7; 16]);
    assert_eq!(post_direct(&run, 1, target, Some(&old), abort.as_bytes()), 401, "a stale proof was taken");
    // And at the master's relay path, the master's own proof replayed there is refused too.
    let m0 = run.stats(0);
    let relayed = m0["admin_log"].as_array().and_then(|l| l.iter().find(|p| p["target"] == "/admin/relay").cloned());
    let relayed = relayed.unwrap_or_else(|| panic!("no relayed POST: {m0:#}"));
    let (rt, rp, rb) = (&relayed["target"], &relayed["proof"], &relayed["body"]);
    let status = post_direct(&run, 0, rt.as_str().expect("target"), rp.as_str(), rb.as_str().unwrap_or("").as_bytes());
    assert_eq!(status, 401, "a replayed relay POST was taken");

    let tx1 = run.stats(1);
    assert_eq!(strings(&tx1["rejected"]), ["replayed", "bad mac", "missing", "stale"], "{tx1:#}");
    assert_eq!(strings(&tx1["admin"]), ["refuse"], "a refused POST changed what tx1 was told");
    assert_eq!(strings(&run.stats(0)["rejected"]), ["replayed"]);

    // The agent's next POSTs are still taken.
    hog.set_mib(40);
    run.wait_for("normal", |s| state(s) == "normal", TIMEOUT);
    wait_stats(&run, 1, "told to serve", |s| strings(&s["admin"]) == ["refuse", "serve"]);
}

#[test]
fn a_proof_is_good_at_its_own_process_only() {
    if !require_group("a_proof_is_good_at_its_own_process_only") {
        return;
    }
    let spec =
        Spec { workers: 2, limit_mib: 256, process: "admin_path = \"/admin/memory\"\n".into(), ..Spec::default() };
    let run = Run::start("proof-sibling", &spec);
    let (tx1_at, tx2_at) = (format!("127.0.0.1:{}", run.ports[1]), format!("127.0.0.1:{}", run.ports[2]));

    // 88% of 256 MiB: both workers refuse, each told on its own admin endpoint.
    let mut hog = Hog::spawn(HOG, run.cg.path(), 224, false);
    run.wait_for("refusing", |s| state(s) == "refusing", TIMEOUT);
    let tx1 = wait_stats(&run, 1, "tx1 told to refuse", |s| strings(&s["admin"]) == ["refuse"]);
    let tx2 = wait_stats(&run, 2, "tx2 told to refuse", |s| strings(&s["admin"]) == ["refuse"]);
    assert_eq!(strings(&tx2["rejected"]), Vec::<String>::new(), "the agent's own POSTs were refused: {tx2:#}");

    // The agent's POST as tx1 received it: sent to tx1's authority, which its Host header names.
    let got = tx1["admin_log"].as_array().and_then(|l| l.first().cloned()).unwrap_or_else(|| panic!("{tx1:#}"));
    assert_eq!((got["verdict"].as_str(), got["host"].as_str()), (Some("accepted"), Some(tx1_at.as_str())), "{got:#}");
    let (target, body) = (got["target"].as_str().expect("target"), got["body"].as_str().expect("body"));
    let proof = got["proof"].as_str().unwrap_or_else(|| panic!("the agent's POST carried no {HEADER}: {got:#}"));
    let t: u64 = proof.strip_prefix("t=").and_then(|p| p.split(',').next()?.parse().ok()).expect("t=<unix ms>");

    // Sent to tx2 as captured, then naming tx1 in its Host header: both refused, within the window.
    assert_eq!(post_direct(&run, 2, target, Some(proof), body.as_bytes()), 401, "tx1's POST was taken by tx2");
    assert_eq!(post_as_host(&run, 2, &tx1_at, target, proof, body.as_bytes()), 401, "taken by tx2 as Host tx1");
    let late = monitor::base::proof::now_ms().abs_diff(t);
    assert!(late < WINDOW_MS, "the replays came {late} ms after the proof: outside the window, refused for that");
    let after = run.stats(2);
    assert_eq!(strings(&after["rejected"]), ["bad mac", "bad mac"], "{after:#}");
    assert_eq!(strings(&after["admin"]), ["refuse"], "a replayed POST changed what tx2 was told: {after:#}");

    // Proven for tx2 with the real secret but about tx1 (its pid): refused too. About tx2 itself: taken.
    let tx2_pid = member(&run.status(), "tx2")["pid"].as_u64().expect("tx2 pid");
    let key = Key::new(&handed_secret(tx2_pid)).expect("a secret of 32 bytes or more");
    let abort = body.replace("\"refuse\"", "\"abort\"");
    let proven_for_tx2 = |body: &str, nonce: u8| {
        key.sign_at("POST", &tx2_at, target, body.as_bytes(), monitor::base::proof::now_ms(), &[nonce; 16])
    };
    let about_tx1 = proven_for_tx2(&abort, 1);
    assert_eq!(post_direct(&run, 2, target, Some(&about_tx1), abort.as_bytes()), 401, "tx1's change taken by tx2");
    let after = run.stats(2);
    assert_eq!(strings(&after["rejected"]), ["bad mac", "bad mac", "not my pid"], "{after:#}");
    assert_eq!(strings(&after["admin"]), ["refuse"], "another process's change was acted on: {after:#}");
    let tx1_pid = member(&run.status(), "tx1")["pid"].as_u64().expect("tx1 pid");
    let own = abort.replacen(&format!("\"pid\":{tx1_pid}"), &format!("\"pid\":{tx2_pid}"), 1);
    assert_ne!(own, abort, "no pid {tx1_pid} in {abort}");
    assert_eq!(post_direct(&run, 2, target, Some(&proven_for_tx2(&own, 2)), own.as_bytes()), 204, "its own refused");
    assert_eq!(strings(&run.stats(2)["admin"]), ["refuse", "abort"]);
    // tx1 saw none of it.
    assert_eq!(strings(&run.stats(1)["admin"]), ["refuse"]);
    hog.set_mib(0);
}

/// A case of the Python check: the header, the receiver's own authority, the target, the body, and the verdict.
type Case<'a> = (Option<String>, &'a str, &'a str, &'a [u8], &'a str);

/// The Python check of docs/deploy.md (the first `python` block after its heading `The agent's POSTs and their
/// proof`), with a loop that reads one case per line and prints the verdict.
fn documented_check() -> String {
    let doc = std::fs::read_to_string(monitor_tests::workspace_root().join("docs/deploy.md")).expect("docs/deploy.md");
    let section = doc.split("## The agent's POSTs and their proof").nth(1).expect("the section in docs/deploy.md");
    let code = section.split("```python\n").nth(1).and_then(|c| c.split("\n```").next()).expect("a python block");
    format!(
        "{code}\n\nimport json, sys\nfor line in sys.stdin:\n    c = json.loads(line)\n    \
         print(proven(c['header'], c['method'], c['authority'], c['target'], bytes.fromhex(c['body'])), \
         flush=True)\n"
    )
}

#[test]
fn the_documented_python_check_agrees_with_monitors_proofs() {
    /// The receiver's own authority.
    const A: &str = "127.0.0.1:3002";
    if !require_program("the_documented_python_check_agrees_with_monitors_proofs", "python3") {
        return;
    }
    let secret = b"a secret of thirty-two bytes, or more".to_vec();
    let key = Key::new(&secret).expect("a long secret");
    let other = Key::new(b"another secret of thirty-two bytes").expect("a long secret");
    let body = br#"{"pid":42,"name":"tx1","action":"abort","state":"aborting","ratio":0.93,"cgroup":"/g"}"#;
    let now = monitor::base::proof::now_ms();
    let sign = |key: &Key, authority: &str, target: &str, body: &[u8], t: u64, n: u8| {
        Some(key.sign_at("POST", authority, target, body, t, &[n; 16]))
    };
    let good = sign(&key, A, "/admin/memory", body, now, 1);
    let mut altered = body.to_vec();
    altered[8] = b'3';
    let cases: Vec<Case> = vec![
        (good.clone(), A, "/admin/memory", body, "True"),
        (good.clone(), A, "/admin/memory", body, "False"),
        (sign(&key, A, "/admin/memory", body, now, 2), A, "/admin/memory", &altered, "False"),
        (sign(&key, A, "/admin/memory", body, now, 3), A, "/admin/Memory", body, "False"),
        (sign(&other, A, "/admin/memory", body, now, 4), A, "/admin/memory", body, "False"),
        (sign(&key, A, "/admin/memory", body, now - 31_000, 5), A, "/admin/memory", body, "False"),
        (None, A, "/admin/memory", body, "False"),
        (Some("t=1,n=2,mac=3".into()), A, "/admin/memory", body, "False"),
        (sign(&key, A, "/admin/memory?x=1", b"", now, 6), A, "/admin/memory?x=1", b"", "True"),
        (sign(&key, A, "/admin/memory", body, now, 7), "127.0.0.1:3003", "/admin/memory", body, "False"),
        (sign(&key, "Relay.Example:8080", "/r", body, now, 8), "relay.EXAMPLE:8080", "/r", body, "True"),
    ];
    let input: String = cases
        .iter()
        .map(|(h, authority, target, body, _)| {
            let hex: String = body.iter().map(|b| format!("{b:02x}")).collect();
            let case = serde_json::json!({"header": h, "method": "POST", "authority": authority, "target": target, "body": hex});
            format!("{case}\n")
        })
        .collect();
    let secret_hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let dir = monitor_tests::TempDir::new("proof-python");
    let input_file = dir.path().join("cases.jsonl");
    std::fs::write(&input_file, input).expect("write the cases");
    let out = std::process::Command::new("python3")
        .args(["-c", &documented_check()])
        .env(SECRET_ENV, secret_hex)
        .stdin(std::fs::File::open(&input_file).expect("the cases"))
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "python3: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let got: Vec<&str> = text.lines().collect();
    let want: Vec<&str> = cases.iter().map(|c| c.4).collect();
    assert_eq!(
        got, want,
        "good, replayed, altered body, altered target, wrong key, stale, none, junk, query, another receiver, case"
    );
}
