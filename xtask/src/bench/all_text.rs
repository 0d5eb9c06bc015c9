//! What docs/benchmarks.md says besides the figures: the page's opening, each benchmark's description (what it
//! measures, against which baseline of the same run, its goal) with the knobs `bench all` runs it with, and the
//! bounds that tests hold. `cargo xtask bench all` (bench/all.rs) writes the page from these and the figures.

pub(super) const ABOUT_PAGE: &str = "\
This page is written by `cargo xtask bench all` (xtask/src/bench/all.rs; its text in xtask/src/bench/all_text.rs):
it runs each benchmark below as `cargo xtask bench <name>`, a process of its own, and puts here what it printed.
Change the text there and run it again rather than editing the page. Every benchmark measures its baseline in the
same run, beside the figure: the machines it runs on are shared with builds, so absolute figures move from run to
run, and only the ratios against a same-run baseline compare. Most benchmarks need root (they create v1 memory
cgroups, load eBPF programs or start nginx); one that cannot run here says why in its section.

`cargo xtask bench all --quick` runs each with fewer rounds and shorter runs, and of the test VM's cgroup v2 cells
of `reaction` only those at full speed on 6.12 (events, the brake, the brake before the last resort, the brake
alone) and five respawn runs (about 25 minutes);
without `--quick` all of them, on both kernels, each booted under emulation, add most of an hour. Each section's
command says what it ran with.
`--skip name,name` leaves benchmarks out; `--only name,name` runs those again and keeps every other section as the
last run left it; `--rewrite` writes this page again from the last run's output (kept in target/bench-all/, or read
back from this page when that is gone) without running anything. Each section's table holds its headline figures,
read from what the benchmark printed (xtask/src/bench/all_figures.rs); the other pages quote a figure only as a link
to its section here, `[1.89x](benchmarks.md#cluster-forwarding-and-gossip)`, and
tests/tests/cli/docs_check.rs fails when a quote is not in the section it links to.
";

/// One benchmark as `bench all` runs it.
pub(super) struct Bench {
    pub name: &'static str,
    pub title: &'static str,
    /// Extra arguments and environment of a full run, then of a `--quick` one.
    pub full: &'static [(&'static str, &'static str)],
    pub quick: &'static [(&'static str, &'static str)],
    /// Programs it needs on PATH.
    pub tools: &'static [&'static str],
    /// Needs a v1 memory cgroup it can create (root).
    pub v1: bool,
    /// What it measures, against what, and its goal (Markdown).
    pub about: &'static str,
}

pub(super) const BENCHES: &[Bench] = &[
    Bench {
        name: "sampler",
        title: "Sampler",
        full: &[],
        quick: &[],
        tools: &[],
        v1: true,
        about: "\
**One full sample of a 16-process group against the raw `pread` of the same files** (criterion,
monitor/benches/sampler.rs). The baseline opens the files a sample reads (the group's `memory.stat` and
`cgroup.procs`, each process's `/proc/<pid>/statm`) once and `pread`s them in a loop: the floor a sample cannot go
under. Goal: full / raw <= 1.5. Then the cost of one `pread` of each file, one kind at a time, over the same 16
`sleep` processes (xtask/src/bench.rs): the figures docs/design.md and monitor/src/sources/procs.rs cite. `status` and
`stat` are there to compare: a sample takes RSS and RssAnon from `statm` (resident − shared is the kernel's
MM_ANONPAGES, the `RssAnon` of `status`), and reads `stat` once per process, when it joins.
",
    },
    Bench {
        name: "host-reads",
        title: "Host reads",
        full: &[],
        quick: &[],
        tools: &[],
        v1: false,
        about: "\
**The host reads whose cost depends on the machine, each against the plain read it replaces** (criterion,
monitor/benches/host_reads.rs). Who holds a port: the LISTEN sockets from the kernel's socket diagnostics
(`sock_diag`), against reading `/proc/self/net/tcp`, which lists every connection of the host, and one readiness
check's `port_owner`. A sample of 200 `sleep` processes, per process: `statm` kept open against open-read-close,
the way the processes past the fd limit are read. No goal: these say what the choices in
monitor/src/sources/sockets/ and monitor/src/sources/procs.rs save.
",
    },
    Bench {
        name: "agent-cpu",
        title: "Agent CPU",
        full: &[("--seconds", "60")],
        quick: &[("--seconds", "30")],
        tools: &[],
        v1: true,
        about: "\
**The release agent at a 100 ms interval, its CPU time by thread from `/proc/<pid>/task/*/schedstat`** (the
scheduler's count in nanoseconds; utime and stime are 10 ms ticks), on four groups: 16 sleeping processes; 1,000
far from the lines; the same 1,000 and one process holding enough that the group is 91% full (refusing, short of
`abort_at`); and the same at 94% with `[policy] kill = false` (aborting, the process told to abort never obeying
nor killed: the worst case, where every sample reads every process's memory). The sampler reads the group's memory
at every sample; it lists the processes and reads their memory and request counters once a second (the history's
resolution) or at once when `monitor run` starts one, and their memory at every sample from `abort_at` up and while
aborting.
Baseline: the benchmarking process itself, sleeping for the same time. Goals: < 0.5% of one core for 16 processes;
< 2% for 1,000 far from the lines, < 5% near them and aborting. Two agents run side by side differ by up to 10% on
this machine.
",
    },
    Bench {
        name: "probes",
        title: "eBPF probes",
        full: &[("PROBES_BENCH_ROUNDS", "6")],
        quick: &[("PROBES_BENCH_ROUNDS", "4")],
        tools: &["nginx", "wrk"],
        v1: false,
        about: "\
**wrk against nginx, the eBPF probes detached against each set of hooks, interleaved rounds in one run**
(monitor/benches/probes_overhead.rs, through `cargo bench -p monitor --bench probes_overhead`; needs root, the built eBPF object and nginx).
nginx (master and one worker, `return 200`, access log off) runs in a cgroup2 group of its own; `wrk -t1 -c32
-d5s`. Each round runs, in rotating order: detached (the baseline); the per-syscall tracepoints (the last
fallback); the raw `sys_exit` program (the fallback before Linux 6.3); the socket programs (the default); the
socket programs with nginx untraced (the floor of those hooks: every run stops at the filter bit and counts
nothing); and two empty `cgroup_skb` programs on nginx's group (the floor of that hook; left out without a cgroup2
hierarchy). Each attached run is compared with the detached run of its round: throughput ratio and CPU per request
(nginx from /proc, wrk from `RUSAGE_CHILDREN`), with their medians over the rounds. One more run per set with the
kernel's BPF statistics on gives the time inside each program. Before the rounds, what everyone else pays: ns per
untraced `getppid` and 1-byte `write` of another process in each mode. Goal: >= 0.97 of detached throughput and
<= 300 ns per request; where the floor modes are already below it, no program on those hooks can meet it.
Knobs: `PROBES_BENCH_ROUNDS` (6), `PROBES_BENCH_SECS` (5), `PROBES_BENCH_CONNS` (32).
",
    },
    Bench {
        name: "proxy",
        title: "Front door",
        full: &[("BENCH_SECONDS", "3"), ("BENCH_ROUNDS", "7")],
        quick: &[("BENCH_SECONDS", "2"), ("BENCH_ROUNDS", "7")],
        tools: &["nginx", "wrk", "valgrind", "callgrind_control", "curl"],
        v1: true,
        about: "\
**The same two release fixture backends behind `monitor run`, nginx (`least_conn`, `keepalive 64`, 2 workers), a
bare hyper hop and a byte relay, wrk at c = 1, 16, 64, interleaved, a direct connection as the latency baseline**
(xtask/src/bench/proxy.rs). The bare hop (tests/src/bin/bare-hop.rs: the same accept loop, no routing, pool,
retry, header rewriting or shedding) is the floor of the library the front door is built on; the byte relay
(tests/src/bin/byte-relay.rs: blocking threads copying bytes, no HTTP) the floor of any proxy on this machine.
Goal: throughput >= nginx's at every c, and added p50 over direct <= 25 µs at c = 1. Columns: CPU µs per request
of the proxy's own processes (user + system, from /proc), and the machine's wake-up interrupts between cores per
request (`RES` + `CAL` in /proc/interrupts): at c = 1 a request is a chain of four wake-ups, and where the kernel
wakes a task on the other (halted) core, the request waits for it. Each round starts at another target, so none
always runs first or right after the same one. The summary gives the means over rounds and, for each ratio, the
median of the per-round ratios with the lowest and highest round beside it: at c = 1 a round in which the scheduler
keeps a proxy beside its backend on one core (IPIs/req near 0.5 instead of 2) serves up to twice as many, and moves
the means by more than the proxies differ. A goal is met only when the median meets it and no round falls more than
10% under it; otherwise the line says `not met`. The same build with `[proxy] track_requests = false` (no requests
in flight kept, no memory per request) runs in the same rounds on two backends of its own: `memory per request
on/off` is what naming the victim's requests and measuring memory per request cost (goal >= 0.98). Beside every
throughput ratio stands the ratio of instructions per request, counted by callgrind after the rounds
(`BENCH_INSTR_REQUESTS` GETs, 500 by default; deterministic, as the next section explains).
`BENCH_PROXY_BASELINE=/path/to/monitor` adds an older build to the same rounds.
",
    },
    Bench {
        name: "proxy-instructions",
        title: "Front door: instructions per request",
        full: &[("BENCH_REQUESTS", "2000")],
        quick: &[("BENCH_REQUESTS", "1000")],
        tools: &["nginx", "curl", "valgrind", "callgrind_control"],
        v1: true,
        about: "\
**User-space instructions per request, counted by valgrind's callgrind** (xtask/src/bench/proxy_instr.rs): the
proxy figure other load on the machine cannot move. Each proxy runs under callgrind in front of two release
fixture backends: `monitor run` (its front door on one thread, only that thread counted), the bare hyper hop, the
byte relay and nginx (one process), and the same `monitor run` with `[proxy] track_requests = false`: the
difference is what keeping each request in flight costs the request. curl sends a warm-up, the counters are
zeroed, curl sends `BENCH_REQUESTS` GETs on one keep-alive connection, and the counters are dumped. Ratios against
nginx and the bare hop of the same run; two instances of one build differ by up to 0.3%.
",
    },
    Bench {
        name: "web",
        title: "Home page and history",
        full: &[],
        quick: &[],
        tools: &[],
        v1: false,
        about: "\
**The home page with 24 h of per-second data for 16 processes and with 7 days for 64, and the agent's memory
holding them** (xtask/src/bench/web.rs, monitor/benches/web_page.rs). Render (criterion): 86,400 samples go
through the real history; the 24 h page (query, downsampling, five SVG charts, HTML) against the same run's
baseline, the same 24 h data as JSON (what `/api/v1/dashboard?range=24h` sends); the 5 min page tells the query's
share from the charts'. Goal: page <= 50 ms. The same for a week of 64 processes (604,800 samples: 10,080 minutes
and the last hour's seconds): the 7 d page against the same week as JSON. Goal: page <= 100 ms. Memory: the bench
binary fills a stats database through the real history (1440 minutes × 16 processes) and reports its own VmRSS
before and after; then the release agent runs twice on a group of 16 `sleep` processes (its own cgroup without
root), with an empty database (the baseline) and with the filled one, serves five 24 h pages, and its VmRSS is
read. Goal: <= 40 MB. The same with a database of 10,080 minutes × 64 processes, on a group of 64 `sleep`
processes, serving five 7 d pages: its VmRSS and its peak (VmHWM) against the same agent with an empty database.
Goal: peak <= 64 MB.
",
    },
    Bench {
        name: "config",
        title: "Config validation",
        full: &[],
        quick: &[],
        tools: &[],
        v1: false,
        about: "\
**`monitor check-config` (release) on 100,000 `[[process]]` tables against 10,000 in the same run, fastest of 3**
(xtask/src/bench/config.rs). Both files end in the same error (the last process reuses the first's port, as any
file of more than 65,535 processes must), named at its line. Linear validation takes about 10 times as long for
10 times the processes, a pairwise one about 100 times. Goal: < 2 s for 100,000.
",
    },
    Bench {
        name: "reaction",
        title: "Reaction to a fast grower",
        full: &[("BENCH_REACTION_RUNS", "20"), ("BENCH_REACTION_VM", "all")],
        quick: &[
            ("BENCH_REACTION_RUNS", "10"),
            ("BENCH_REACTION_VM", "6.12"),
            ("BENCH_REACTION_VM_RUNS", "5"),
            ("BENCH_REACTION_VM_MODES", "events,brake,brake-kill,held,respawn"),
            ("BENCH_REACTION_VM_SPEEDS", "0"),
            ("BENCH_REACTION_VM_RESPAWN_RUNS", "5"),
        ],
        tools: &[],
        v1: true,
        about: "\
**Does the agent abort a fast grower before the kernel's OOM killer acts, and how soon after the group crosses
92%?** (xtask/src/bench/reaction.rs, tests/src/reaction.rs). The cells run on this host (cgroup v1), then, unless
`BENCH_REACTION_VM=none`, in the test VM once per kernel (cgroup v2, Debian 6.1 and 6.12, qemu with software
emulation: every instruction emulated, so the grower reaches about 100 MB/s there and CPU times are inflated).
Each run starts from nothing: a new 512 MiB group, two 40 MiB `alloc-hog` bystanders, one `grower`
(tests/src/bin/grower.rs: 4 MiB chunks up to 700 MiB, each stamped with `CLOCK_MONOTONIC`, everything freed on
SIGUSR2) and a new release `monitor agent` with `[actions] abort_signal = \"SIGUSR2\"`. Speeds 200 MB/s, 1 GB/s
and full speed (the grower's own speed in brackets). Modes: timer only (`interval_ms = 100`, `wakeups = []`,
`pacing = false`: the baseline), events + pacing (the defaults) and, on v2, the defaults with `brake_at = 0.96`.
Mode `stubborn` runs the defaults against a grower that ignores every signal it can (`grower --ignore-all`), so only
the agent's last resort, its SIGKILL at `kill_at` (97%), stops it before the kernel does; its cells have a table of
their own. Mode `brake-kill` (v2 only) is the same with `brake_at = 0.96`: `memory.high` slows the grower from
96% until the agent's SIGKILL at 97% ends it. Mode `held` (v2 only) is the brake alone: the same grower, the
defaults with `brake_at = 0.96` and the last resort off (`kill = false`), so the agent's abort is ignored and
nothing but `memory.high` at 96% of the limit slows the grower; the bench watches it for 15 s from its start and
ends it then if the kernel has not. Runs are interleaved (run 1 of every cell, then run 2, …).
The respawn cell (tests/src/reaction/respawn.rs) runs `stress-ng --vm 2 --vm-bytes 700M --timeout 20s`, whose
parent starts a new worker for each one killed, in a new 512 MiB group beside a 40 MiB `alloc-hog`: once without
an agent, then in another new group under a new release `monitor agent` with the defaults (on v2 with
`brake_at = 0.96`). It counts the kernel's OOM kills (from the group) and the agent's kills (its `killed:` log
lines), each also per second, and checks that stress-ng's parent ran to its end and the bystander lives. The floor:
a thread reads the group's usage every millisecond; for each kill, the group's growth over the 20 ms before it
times the time from the kill to the usage having fallen by half of what the victim held (as the agent counts a kill
done); its p90 against the headroom from `kill_at` (and from `abort_at`, the lowest the kill line moves to while
an allocator respawns) to the limit.

- **agent acted first**: the grower got the signal and the group's own OOM kill count did not move.
- **kernel OOM kills**: read from the group (v1 `memory.oom_control`, v2 `memory.events`), not from the agent.
- **crossing -> signal**: from the grower's stamps: the crossing is the first chunk at which base (what the agent
  counts of the group before the grower starts: anon, shmem and kernel memory) + the grower's bytes reach 92% of
  the limit, the signal is stamped in its handler; a chunk is stamped once touched, so the true
  crossing is up to a chunk earlier, and a signal before the stamp counts 0 ms (\"before the line\"). p99 is
  nearest-rank.
- **overshoot**: base + the grower's bytes at its last chunk before the signal, minus the 92% line.
- **idle CPU**: the agent's utime + stime over the idle seconds before the mode's first run, and its threads' run
  time from schedstat; in brackets the baseline, the bench's own sleeping process.

- **stubborn: crossing 97% -> SIGKILL**: from the crossing (placed inside the crossing chunk by the grower's speed)
  to the agent's own `CLOCK_MONOTONIC` stamp of its kill (`kills[].sent_mono_ns` in `/api/v1/status`); **-> grower
  dead** runs on to the grower's output closing, after its exit has freed its memory.
- **held: throttled above 96%**: from the group reaching 96% (placed inside the crossing chunk) to the end of the
  window or the grower's death; **speed above 96%**: what it gained from the line to its last stamp (or the group's
  usage at the window's end), over that time, against its speed before the line (its stamps); **slowed by**: the one
  over the other.

Goals: the agent acts first in every run, crossing -> signal p99 <= 20 ms, idle CPU < 0.5% of a core; stubborn and
brake-kill: the agent's SIGKILL ends the grower and the kernel kills nobody in every run, both bystanders live;
held: the grower at least 10x slower above 96% than before, both bystanders live; respawn: no kernel OOM kill
under the agent (on v1 at most 1 in 20 of the agent-less run's where the floor exceeds the headroom), on v2 with
the brake none in every run, stress-ng's parent and the bystander alive in every run. `memory.high` throttles, it does
not stop: with no swap a grower held there keeps gaining, slowly, and with the last resort off the kernel's OOM
killer ends it at the limit, so held's OOM kills are expected; its throttled time is the time the brake buys the
agent.
Knobs: `BENCH_REACTION_RUNS` (20), `BENCH_REACTION_IDLE_S` (10), `BENCH_REACTION_MODES`, `BENCH_REACTION_SPEEDS`,
`BENCH_REACTION_CROWD` (0: sleeping processes added to each group), `BENCH_REACTION_RESPAWN_RUNS` (3) and
`BENCH_REACTION_RESPAWN_S` (20) for the respawn cell (`respawn` in the modes' list), `BENCH_REACTION_VM` (`all`, `6.1`, `6.12`,
`none`), and `BENCH_REACTION_VM_RUNS`, `_VM_IDLE_S`, `_VM_MODES`,
`_VM_SPEEDS`, `_VM_RESPAWN_RUNS`, `_VM_RESPAWN_S` for the VM's cells apart from the host's.
",
    },
    Bench {
        name: "reaction-crowd",
        title: "Reaction among 1,000 processes",
        full: &[("BENCH_REACTION_RUNS", "20")],
        quick: &[("BENCH_REACTION_RUNS", "10")],
        tools: &[],
        v1: true,
        about: "\
**The reaction suite above with 1,000 sleeping processes in each run's group** (the same code, and
`BENCH_REACTION_CROWD=1000`): among 1,003 processes the agent must still send its abort to the grower, the
largest, before the kernel's OOM killer acts. On this host (cgroup v1), mode events (the defaults), 200 MB/s and
full speed. Far from the lines the agent lists the group's processes once a second; from `abort_at` up it lists
and reads them at every sample, so a grower started within the last second is among them. Goals as above: the
agent acts first in every run, crossing -> signal p99 <= 20 ms. The table's idle goal (< 0.5%) is the one for a
few processes; a thousand cost what [Agent CPU](#agent-cpu) measures far from the lines (goal < 2%).
",
    },
    Bench {
        name: "cluster",
        title: "Cluster: forwarding and gossip",
        full: &[("BENCH_SECONDS", "5"), ("BENCH_ROUNDS", "3"), ("GOSSIP_SECONDS", "30")],
        quick: &[("BENCH_SECONDS", "3"), ("BENCH_ROUNDS", "2"), ("GOSSIP_SECONDS", "15")],
        tools: &["wrk"],
        v1: false,
        about: "\
**A request forwarded to the node that owns its cache against one served where it arrives, and the gossip each
node sends** (xtask/src/bench/cluster.rs). Every node is a release `monitor run` on a loopback address of its own
(127.0.1.x) with `[cluster]` at its defaults (1000 ms suspect, 5000 ms dead) over fixture-backend processes.
Forwarding: two nodes a and b; `wrk -t2 -c16` sends `/fhir/use` to b's front door with a cache id minted on b
(served by b's process: the baseline) and with one minted on a (b forwards it, with its signed hop header, on a
kept-alive connection, to a's front door, which serves it), interleaved rounds. Goal: forwarded p50 <= 1.6 × local
p50. The floor of any extra hop on this machine, in the same rounds: a byte relay (tests/src/bin/byte-relay.rs:
blocking threads, no HTTP) in front of b with b's own ids; a forward's cost is reported over it. Gossip: 3, then
50 nodes (each over one fixture master), every one listing all the others alive; each node's
`monitor_cluster_gossip_bytes_total` (UDP payloads, without the 28 bytes of IPv4 and UDP headers a datagram) read
twice, `GOSSIP_SECONDS` apart. Knobs: `BENCH_SECONDS` (5), `BENCH_ROUNDS` (3), `GOSSIP_SECONDS` (30),
`GOSSIP_MEMBERS` (50).
",
    },
    Bench {
        name: "image",
        title: "The container image",
        full: &[],
        quick: &[],
        tools: &[],
        v1: false,
        about: "\
**The OCI image's size, and `monitor run` as a container's PID 1 under podman: how soon it is ready, against one
bare server's start in the same run, and how long `podman stop` takes** (xtask/src/bench/image.rs). The image is
`cargo xtask dist --image` without `--include`: the release binary on Debian bookworm's minbase (the archive, and
unpacked as podman stores it). podman (as root, runc, the cgroupfs manager, storage of its own, host networking,
`--memory 256m`) runs it 5 times with a master and two workers (`fixture-backend`, mounted in); start is from
`podman run` to `/healthz` answering 200, which the API does once all three are ready. The baseline: the same image
with one `fixture-backend` as its entrypoint, from `podman run` to its first answer (the runtime's own start and one
server's, which no supervisor can beat). Stop: `podman stop` of each, which drains and must end with exit code 0.
Medians of the 5. Root (buildah, mmdebstrap, podman and runc are installed when missing).
",
    },
];

pub(super) const TESTS_HOLD: &str = "\
## Bounds the tests hold

These are not benchmarks but limits that tests assert on every run (as root, in CI); each names the test that
holds it and reproduces it.

### Agent under load

The agent is a memory guard: it must never become the process that uses the memory. **With a 500-process group
and a day of history, while 64 clients ask for the home page for 10 s, its peak (VmHWM) stays under 64 MB and
every `/healthz` probe meanwhile answers within 1 s, all but one in fifty within 100 ms** (the prober at nice -5,
as a kubelet or systemd would not queue behind the load); 300 idle connections lock no probe out; a removed
group makes `/healthz` 503 with the reason, and 200 again within an interval of its return.
`cargo test -p monitor-tests --test bounds -- --nocapture` (it prints its figures). What bounds it: renders
two at a time on threads of their own at nice 10, one render per range and sample shared by every request that
wants it, 503 with `Retry-After` past 16 requests in progress; a range past 20 processes draws the largest and sums
the rest; `/api/v1/status` and `/metrics` built on a thread of their own each, 16 requests waiting at most; at
most 256 API connections, 64 per client address, the longest-idle closed to admit a new one. Not covered: the
history held in memory grows with the group and the days it keeps, whatever the requests.

### `monitor run` under every load at once

**With the probes loaded, while 64 clients ask for the home page, 300 API connections stay idle, 2,000 slow clients
send request bodies a few bytes a second to the front door and `wrk -c64` runs through it for 10 s, the whole
process's peak (VmHWM) stays under 64 MB, and wrk's requests are all answered 2xx (or shed 503) with no socket
error.** `cargo test -p monitor-tests --test bounds every_load -- --nocapture` (it prints its peak). What bounds it:
at most `[proxy] max_connections` (256) front-door connections, the one longest owing its request closed to admit
a new one (never one with a request at a process); request bodies kept for a retry only up to
`body_buffer_bytes` (64 KiB) each and `body_buffer_total_bytes` (8 MiB) in all, copied out of hyper's read
buffers; heads of at most `max_header_bytes`, read within `header_read_timeout_s`. Not covered: the upstream side
buffers up to hyper's default (about 400 KiB) per connection to a process for a large response.

### Front door drain

**A SIGTERM under keep-alive load loses no request**: `wrk -c16` through `monitor run` across a SIGTERM sees 0
socket errors and 0 non-2xx answers, with fast and with slow answers.
`cargo test -p monitor-tests --test run drain_load -- --nocapture`.

### Readiness checks and file descriptors

- **Every process sampled past the fd limit**: 1,101 processes under a limit of 1,024 descriptors, the rest read
  by open-read-close. `cargo test -p monitor-tests --test agent fds`. The cost per process of each way:
  [Host reads](#host-reads).
- **Who holds a port**: the kernel's socket diagnostics, not `/proc/self/net/tcp`; the cost of each per read:
  [Host reads](#host-reads).
";
