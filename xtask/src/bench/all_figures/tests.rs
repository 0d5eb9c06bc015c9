//! Each benchmark's figures, read from what it printed in a recorded run (xtask/fixtures/bench-all/).

use super::*;

macro_rules! sample {
    ($name:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/bench-all/", $name, ".txt"))
    };
}

/// The figures of `name` in `output` as (what, value) pairs, every one found.
fn read(name: &str, output: &str) -> Vec<(String, String)> {
    figures(name, output)
        .into_iter()
        .map(|f| {
            let value = f.value.unwrap_or_else(|| panic!("{name}: {:?} not read", f.what));
            (f.what, value)
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(w, v)| (w.to_string(), v.to_string())).collect()
}

#[test]
fn numbers_keep_their_sign_and_unit() {
    for (text, want) in [
        ("46.0 µs, full", Some("46.0 µs")),
        ("+32 µs, bare hop", Some("+32 µs")),
        ("-287 ns", Some("-287 ns")),
        ("0.562% of one core", Some("0.562%")),
        ("1.629 s (goal < 2 s)", Some("1.629 s")),
        ("0.107 s: monitor", Some("0.107 s")),
        ("509 B/s (max 550)", Some("509 B/s")),
        ("1.89 (rounds: 2.03, 1.75)", Some("1.89")),
        ("3.48; 5 min page", Some("3.48")),
        ("12 processes", Some("12")),
        ("1.5.", Some("1.5")),
        ("- / - ms", None),
        ("ms", None),
        ("", None),
    ] {
        assert_eq!(number_with_unit(text).as_deref(), want, "{text:?}");
    }
    assert_eq!(value_after("a: x 1, b: y 2", "b: y "), Some("2".into()));
    assert_eq!(value_after("a: x 1", "missing"), None);
    assert_eq!(p99("0.5 / 0.7 ms"), Some("0.7 ms".into()));
    assert_eq!(p99("- / - ms"), Some("-".into()));
}

#[test]
fn tables_are_read_by_their_header() {
    let out =
        "before\n| file | µs | / x |\n| --- | ---: | ---: |\n| a | 1.5 | 2 |\n| b | 3 | 4 |\nafter\n| k |\n| --- |\n";
    let all = tables(out);
    assert_eq!(all.len(), 2);
    let t = &all[0];
    assert_eq!((t.header.clone(), t.rows.len()), (vec!["file", "µs", "/ x"], 2));
    assert_eq!(t.row("b").and_then(|r| t.cell(r, "/ x")), Some("4"));
    assert_eq!(t.row("c"), None);
    assert!(all[1].rows.is_empty());
}

#[test]
fn sampler() {
    let want = [
        ("full sample, 16 processes", "46.0 µs"),
        ("raw pread of the same files", "39.5 µs"),
        ("full sample / raw pread", "1.16x"),
        ("one core spent sampling at a 100 ms interval", "0.046%"),
        ("one pread of the group's `memory.stat`", "7.87 µs"),
        ("one pread of the group's `cgroup.procs`", "3.82 µs"),
        ("one pread of `/proc/<pid>/statm`", "0.96 µs"),
        ("one pread of `/proc/<pid>/status`", "8.15 µs"),
        ("`status` / `statm`", "8.5x"),
        ("one pread of `/proc/<pid>/stat`", "3.16 µs"),
    ];
    assert_eq!(read("sampler", sample!("sampler")), pairs(&want));
}

#[test]
fn host_reads() {
    let want = [
        ("LISTEN sockets from sock_diag, one read", "52.0 µs"),
        ("LISTEN sockets from `/proc/self/net/tcp`, one read", "11.6 ms"),
        ("one readiness check's `port_owner`", "60.1 µs"),
        ("a sample, per process, `statm` kept open", "2.5 µs"),
        ("a sample, per process, open-read-close", "30.0 µs"),
    ];
    assert_eq!(read("host-reads", sample!("host-reads")), pairs(&want));
}

#[test]
fn agent_cpu() {
    let want = [
        ("16 processes: the agent's CPU, share of one core", "0.372%"),
        ("16 processes: its sampler thread", "0.179%"),
        ("16 processes: samples taken", "298"),
        ("16 processes: the baseline, this sleeping process", "0.001%"),
        ("1,000 processes far from the lines: the agent's CPU, share of one core", "1.052%"),
        ("1,000 processes far from the lines: its sampler thread", "0.708%"),
        ("1,000 processes far from the lines: samples taken", "298"),
        ("1,000 processes far from the lines: the baseline, this sleeping process", "0.009%"),
        ("1,001 processes near the lines: the agent's CPU, share of one core", "1.307%"),
        ("1,001 processes near the lines: its sampler thread", "0.811%"),
        ("1,001 processes near the lines: samples taken", "298"),
        ("1,001 processes near the lines: the baseline, this sleeping process", "0.005%"),
        ("1,001 processes aborting: the agent's CPU, share of one core", "4.535%"),
        ("1,001 processes aborting: its sampler thread", "4.013%"),
        ("1,001 processes aborting: samples taken", "297"),
        ("1,001 processes aborting: the baseline, this sleeping process", "0.001%"),
    ];
    assert_eq!(read("agent-cpu", sample!("agent-cpu")), pairs(&want));
}

#[test]
fn probes() {
    let want = [
        ("tracepoints: throughput / detached, median of the rounds", "0.849x"),
        ("tracepoints: CPU per request over detached, median", "2412 ns"),
        ("raw sys_exit: throughput / detached, median of the rounds", "0.886x"),
        ("raw sys_exit: CPU per request over detached, median", "1691 ns"),
        ("socket: throughput / detached, median of the rounds", "0.919x"),
        ("socket: CPU per request over detached, median", "1364 ns"),
        ("socket, nginx untraced: throughput / detached, median of the rounds", "0.979x"),
        ("socket, nginx untraced: CPU per request over detached, median", "225 ns"),
        ("empty cgroup_skb programs: throughput / detached, median of the rounds", "1.008x"),
        ("empty cgroup_skb programs: CPU per request over detached, median", "-185 ns"),
        ("Tracepoints: time in the programs per request", "1540 ns"),
        ("RawSysExit: time in the programs per request", "1326 ns"),
        ("Sock: time in the programs per request", "1109 ns"),
        ("Sock, nginx not traced: time in the programs per request", "391 ns"),
        ("Empty cgroup_skb programs: time in the programs per request", "151 ns"),
    ];
    assert_eq!(read("probes", sample!("probes")), pairs(&want));
}

#[test]
fn proxy() {
    let want = [
        ("instructions per request (callgrind), monitor run", "34175"),
        ("instructions per request (callgrind), the bare hop", "23217"),
        ("instructions per request (callgrind), nginx", "19872"),
        ("monitor / nginx throughput at c=1", "0.75x"),
        ("median of the rounds' monitor / nginx at c=1", "0.73x"),
        ("lowest round's monitor / nginx at c=1", "0.60x"),
        ("highest round's monitor / nginx at c=1", "0.89x"),
        ("goal monitor >= nginx at c=1", "not met"),
        ("instructions per request, monitor / nginx (at c=1)", "1.72x"),
        ("monitor's added p50 over direct at c=1", "+30 µs"),
        ("nginx's added p50 over direct at c=1", "+2 µs"),
        ("monitor / bare hop throughput at c=1", "0.96x"),
        ("median of the rounds' monitor / bare hop at c=1", "0.90x"),
        ("lowest round's monitor / bare hop at c=1", "0.84x"),
        ("instructions per request, monitor / bare hop (at c=1)", "1.47x"),
        ("memory per request on / off at c=1", "1.03x"),
        ("lowest round's memory per request on / off at c=1", "0.82x"),
        ("goal on / off >= 0.98 at c=1", "not met"),
        ("monitor's syscalls / context switches per request at c=1", "6.03 / 2.01"),
        ("the bare hop's syscalls / context switches per request at c=1", "6.00 / 2.00"),
        ("monitor / nginx throughput at c=16", "0.99x"),
        ("median of the rounds' monitor / nginx at c=16", "0.98x"),
        ("lowest round's monitor / nginx at c=16", "0.91x"),
        ("highest round's monitor / nginx at c=16", "1.10x"),
        ("goal monitor >= nginx at c=16", "not met"),
        ("instructions per request, monitor / nginx (at c=16)", "1.72x"),
        ("monitor's added p50 over direct at c=16", "+141 µs"),
        ("nginx's added p50 over direct at c=16", "+141 µs"),
        ("monitor / bare hop throughput at c=16", "0.96x"),
        ("median of the rounds' monitor / bare hop at c=16", "0.95x"),
        ("lowest round's monitor / bare hop at c=16", "0.88x"),
        ("instructions per request, monitor / bare hop (at c=16)", "1.47x"),
        ("memory per request on / off at c=16", "1.03x"),
        ("lowest round's memory per request on / off at c=16", "0.96x"),
        ("goal on / off >= 0.98 at c=16", "met"),
        ("monitor's syscalls / context switches per request at c=16", "4.53 / 0.40"),
        ("the bare hop's syscalls / context switches per request at c=16", "4.46 / 0.37"),
        ("monitor / nginx throughput at c=64", "0.90x"),
        ("median of the rounds' monitor / nginx at c=64", "0.90x"),
        ("lowest round's monitor / nginx at c=64", "0.78x"),
        ("highest round's monitor / nginx at c=64", "1.06x"),
        ("goal monitor >= nginx at c=64", "not met"),
        ("instructions per request, monitor / nginx (at c=64)", "1.72x"),
        ("monitor's added p50 over direct at c=64", "+387 µs"),
        ("nginx's added p50 over direct at c=64", "+244 µs"),
        ("monitor / bare hop throughput at c=64", "0.99x"),
        ("median of the rounds' monitor / bare hop at c=64", "1.00x"),
        ("lowest round's monitor / bare hop at c=64", "0.91x"),
        ("instructions per request, monitor / bare hop (at c=64)", "1.47x"),
        ("memory per request on / off at c=64", "0.97x"),
        ("lowest round's memory per request on / off at c=64", "0.95x"),
        ("goal on / off >= 0.98 at c=64", "not met"),
        ("monitor's syscalls / context switches per request at c=64", "4.17 / 0.24"),
        ("the bare hop's syscalls / context switches per request at c=64", "4.27 / 0.24"),
    ];
    assert_eq!(read("proxy", sample!("proxy")), pairs(&want));
}

#[test]
fn proxy_instructions() {
    let want = [
        ("monitor run: instructions per request", "33576"),
        ("monitor run (track_requests = false): instructions per request", "32242"),
        ("bare hyper hop: instructions per request", "23193"),
        ("byte relay: instructions per request", "372"),
        ("nginx: instructions per request", "19867"),
        ("monitor run / nginx", "1.69x"),
        ("monitor run / bare hyper hop", "1.45x"),
    ];
    assert_eq!(read("proxy-instructions", sample!("proxy-instructions")), pairs(&want));
}

#[test]
fn web() {
    let want = [
        ("the 24 h page, render", "6.40 ms"),
        ("the same data as JSON", "2.01 ms"),
        ("page / JSON", "3.18x"),
        ("the 7 d page of 64 processes, render", "21.65 ms"),
        ("the same week as JSON", "12.56 ms"),
        ("7 d page / JSON", "1.72x"),
        ("the agent's VmRSS, empty database", "14.8 MB"),
        ("the agent's VmRSS, a day of 16 processes", "18.5 MB"),
        ("with a full hour's ring added, at most", "27.4 MB"),
        ("the agent's VmRSS, empty database, 64 processes", "14.7 MB"),
        ("the agent's VmRSS, a week of 64 processes", "46.1 MB"),
        ("the agent's peak RSS, a week of 64 processes", "46.1 MB"),
    ];
    assert_eq!(read("web", sample!("web")), pairs(&want));
}

#[test]
fn config() {
    let want = [
        ("check-config, 100,000 processes", "1.629 s"),
        ("check-config, 10,000 processes", "0.107 s"),
        ("100,000 / 10,000", "15.3x"),
    ];
    assert_eq!(read("config", sample!("config")), pairs(&want));
}

#[test]
fn reaction() {
    let got = read("reaction", sample!("reaction"));
    let want: Vec<(String, String)> = [
        ("timer only (100 ms), 200 MB/s", "agent acted first", "10/10"),
        ("timer only (100 ms), 200 MB/s", "crossing 92% -> signal p99", "72.4 ms"),
        ("timer only (100 ms), 1 GB/s", "agent acted first", "0/10"),
        ("timer only (100 ms), 1 GB/s", "crossing 92% -> signal p99", "-"),
        ("timer only (100 ms), full speed", "agent acted first", "0/10"),
        ("timer only (100 ms), full speed", "crossing 92% -> signal p99", "-"),
        ("timer only (100 ms), full speed", "grower's own speed", "-"),
        ("events + pacing (defaults), 200 MB/s", "agent acted first", "10/10"),
        ("events + pacing (defaults), 200 MB/s", "crossing 92% -> signal p99", "5.1 ms"),
        ("events + pacing (defaults), 1 GB/s", "agent acted first", "10/10"),
        ("events + pacing (defaults), 1 GB/s", "crossing 92% -> signal p99", "3.6 ms"),
        ("events + pacing (defaults), full speed", "agent acted first", "10/10"),
        ("events + pacing (defaults), full speed", "crossing 92% -> signal p99", "0.7 ms"),
        ("events + pacing (defaults), full speed", "grower's own speed", "2339 MB/s"),
        ("events + pacing (defaults), grower ignores every signal, 200 MB/s", "killed by the agent", "10/10"),
        ("events + pacing (defaults), grower ignores every signal, 200 MB/s", "kernel OOM kills", "0"),
        (
            "events + pacing (defaults), grower ignores every signal, 200 MB/s",
            "crossing 97% -> SIGKILL p99",
            "19.85 ms",
        ),
        ("events + pacing (defaults), grower ignores every signal, 1 GB/s", "killed by the agent", "10/10"),
        ("events + pacing (defaults), grower ignores every signal, 1 GB/s", "kernel OOM kills", "0"),
        ("events + pacing (defaults), grower ignores every signal, 1 GB/s", "crossing 97% -> SIGKILL p99", "3.38 ms"),
        ("events + pacing (defaults), grower ignores every signal, full speed", "killed by the agent", "10/10"),
        ("events + pacing (defaults), grower ignores every signal, full speed", "kernel OOM kills", "0"),
        (
            "events + pacing (defaults), grower ignores every signal, full speed",
            "crossing 97% -> SIGKILL p99",
            "1.43 ms",
        ),
    ]
    .iter()
    .map(|(cell, what, v)| (format!("{cell}: {what}"), v.to_string()))
    .collect();
    assert_eq!(got, want);
    // Two groups (the host, then the test VM's kernels): each figure names its group.
    let vm = sample!("reaction")
        .replace("| v1, Linux 6.18.44-fc-v1045 (host) | events", "| v2, Linux 6.12 (VM, TCG) | events");
    let both = read("reaction", &vm);
    assert_eq!(both.len(), want.len());
    // The host's own tables first, then all cells again with the VM's: the figures are read from the latter only.
    let whole = format!("{}\nAll cells (agent abc1234):\n{vm}", sample!("reaction"));
    assert_eq!(read("reaction", &whole), both);
    assert!(
        both.contains(&(
            "timer only (100 ms), 200 MB/s (v1, Linux 6.18.44-fc-v1045 (host)): agent acted first".into(),
            "10/10".into()
        )),
        "{both:?}"
    );
    assert!(
        both.contains(&(
            "events + pacing (defaults), full speed (v2, Linux 6.12 (VM, TCG)): grower's own speed".into(),
            "2339 MB/s".into()
        )),
        "{both:?}"
    );
}

#[test]
fn cluster() {
    let want = [
        ("forwarded / local p50", "1.89x"),
        ("throughput forwarded / local", "0.56x"),
        ("local p50", "355 µs"),
        ("forwarded p50", "668 µs"),
        ("the floor: one byte-relay hop / local p50", "1.72x"),
        ("forwarded over the floor", "1.10x"),
        ("gossip sent per node, 3 members", "509 B/s"),
        ("gossip sent per node, 50 members", "3658 B/s"),
        ("gossip of the whole cluster, 50 members", "182.9 kB/s"),
    ];
    assert_eq!(read("cluster", sample!("cluster")), pairs(&want));
}

#[test]
fn image() {
    let want = [
        ("image archive", "47.5 MiB"),
        ("image unpacked", "136.9 MiB"),
        ("podman run to ready (master and two workers)", "204 ms"),
        ("podman run to one bare server's answer", "155 ms"),
        ("ready / bare server", "1.32x"),
        ("podman stop (drain, exit 0)", "178 ms"),
    ];
    assert_eq!(read("image", sample!("image")), pairs(&want));
}

#[test]
fn every_benchmark_has_a_reader_and_a_recorded_output() {
    for b in crate::bench::all_text::BENCHES {
        let path = crate::util::root().join("xtask/fixtures/bench-all").join(format!("{}.txt", b.name));
        let output = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!read(b.name, &output).is_empty(), "{}: no figures are read for it", b.name);
    }
}
