//! Alerts over https: a webhook on loopback (the shared [`Recorder`], python's http.server behind TLS), its
//! certificate signed by a CA made for the test (openssl) and given to the agent in `[alerts] ca_file`, with a
//! bearer token from `[alerts] bearer_token_file`. The webhook refuses the first alert with 400: the agent does not
//! send it again; it accepts the next one, which arrives with the token.

use monitor_tests::config::Config;
use monitor_tests::{require, require_root, temp_dir, Agent, Group, Hog, Recorder};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");

/// A CA and a certificate for 127.0.0.1 signed by it: (CA certificate, server certificate, server key).
fn certificates(dir: &Path) -> (String, String, String) {
    let p = |f: &str| dir.join(f).display().to_string();
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap_or_else(|e| panic!("{e}"));
    let steps: [&[&str]; 3] = [
        &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &p("ca.key"), "-out", &p("ca.pem")],
        &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", &p("srv.key"), "-out", &p("srv.csr")],
        &["x509", "-req", "-in", &p("srv.csr"), "-CA", &p("ca.pem"), "-CAkey", &p("ca.key")],
    ];
    let extra: [&[&str]; 3] = [
        &["-days", "2", "-subj", "/CN=monitor test CA"],
        &["-subj", "/CN=127.0.0.1"],
        &["-CAcreateserial", "-out", &p("srv.pem"), "-days", "2", "-extfile", &p("san.ext")],
    ];
    for (args, more) in steps.iter().zip(extra) {
        let out = Command::new("openssl").args(*args).args(more).output().unwrap_or_else(|e| panic!("openssl: {e}"));
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    (p("ca.pem"), p("srv.pem"), p("srv.key"))
}

#[test]
fn an_https_webhook_behind_a_private_ca_gets_the_alert_with_its_token_and_a_400_is_not_retried() {
    let test = "an_https_webhook_behind_a_private_ca_gets_the_alert_with_its_token_and_a_400_is_not_retried";
    if !require_root(test) {
        return;
    }
    let has_openssl = Command::new("openssl").arg("version").output().is_ok_and(|o| o.status.success());
    if !require(has_openssl, test, "needs openssl (apt-get install openssl)") {
        return;
    }
    let dir = temp_dir("alerts-tls");
    let (ca, cert, key) = certificates(&dir);
    // The webhook refuses the first POST with 400 and takes the others.
    let hook = Recorder::start_tls(&[400], 200, Path::new(&cert), Path::new(&key));
    let token = dir.join("token");
    monitor_tests::write_secret(&token, b"s3cret-token\n");
    let config = Config::new()
        .set("alerts", "webhook", hook.url("/hook"))
        .set("alerts", "ca_file", ca.as_str())
        .set("alerts", "bearer_token_file", token.display().to_string())
        .set("alerts", "quiet_s", 1)
        .probes(false);
    let check = Command::new(monitor_tests::agent::monitor_bin())
        .args(["check-config", &config.write(dir.join("check.toml")).display().to_string()])
        .output()
        .unwrap_or_else(|e| panic!("check-config: {e}"));
    assert!(check.status.success(), "check-config: {}", String::from_utf8_lossy(&check.stderr));

    let cg = Group::here("alerts-tls", Some(256 << 20));
    let mut big = Hog::spawn(HOG, cg.path(), 100, false);
    let agent = Agent::with_config(&cg.path().display().to_string(), &config, &dir);
    let state = |want: &'static str| move |s: &Value| s["policy"]["state"] == want;
    agent.wait_for(state("normal"), Duration::from_secs(10));

    // Refusing: the first alert reaches the webhook over TLS and is refused with 400.
    big.set_mib(225);
    agent.wait_for(state("refusing"), Duration::from_secs(10));
    let first = hook.wait_for(1, Duration::from_secs(10)).remove(0);
    assert_eq!(first.status, 400, "{first:?}");
    assert_eq!(first.json()["alerts"][0]["labels"]["alertname"], "MonitorGroupRefusing", "{first:?}");
    assert_eq!(first.header("authorization"), Some("Bearer s3cret-token"), "{first:?}");
    // Past the sink's whole retry schedule (0.5 + 1 + 2 + 4 s): no second POST of that batch.
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(hook.requests().len(), 1, "a 400 is not retried: {:#?}", hook.requests());

    // Aborting: the next alert is accepted.
    big.set_mib(240);
    agent.wait_for(state("aborting"), Duration::from_secs(10));
    let second = hook.wait_for(2, Duration::from_secs(10)).remove(1);
    let body = second.json();
    assert_eq!(second.status, 200, "{second:?}");
    assert_eq!(body["alerts"][0]["labels"]["alertname"], "MonitorGroupAborting", "{body}");
    assert_eq!(second.header("authorization"), Some("Bearer s3cret-token"));
    let instance = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    assert_eq!(body["alerts"][0]["labels"]["instance"], instance.trim(), "{body}");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
