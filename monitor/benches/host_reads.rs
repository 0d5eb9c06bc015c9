//! The host reads whose cost depends on the machine, each against the plain read it replaces, in one run
//! (`cargo bench -p monitor --bench host_reads`):
//! - the LISTEN sockets from the kernel's socket diagnostics, against reading `/proc/self/net/tcp` (every
//!   connection of the host), and one readiness check's `port_owner`;
//! - a sample of 200 processes per process, with their `statm` kept open against open-read-close.

use criterion::{criterion_group, criterion_main, Criterion};
use monitor::sources::procs::ProcTable;
use monitor::sources::sockets::{self, diag};
use std::hint::black_box;
use std::process::{Child, Command};

fn listeners(c: &mut Criterion) {
    let mut g = c.benchmark_group("listeners");
    g.bench_function("sock_diag", |b| b.iter(|| black_box(diag::listeners())));
    g.bench_function("proc-net-tcp", |b| b.iter(|| black_box(std::fs::read_to_string("/proc/self/net/tcp"))));
    g.bench_function("port_owner", |b| b.iter(|| black_box(sockets::port_owner(std::process::id(), 1))));
    g.finish();
}

/// Ends the children when the benchmark does.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for k in &mut self.0 {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

const PROCESSES: usize = 200;

fn procs(c: &mut Criterion) {
    let kids = Children((0..PROCESSES).filter_map(|_| Command::new("sleep").arg("600").spawn().ok()).collect());
    let mut pids: Vec<u32> = kids.0.iter().map(Child::id).collect();
    pids.sort_unstable();
    let mut g = c.benchmark_group(format!("procs-{}", pids.len()));
    for (name, budget) in [("statm-kept-open", usize::MAX), ("open-read-close", 0)] {
        let mut t = ProcTable::new();
        t.set_keep_budget(budget);
        let mut out = Vec::new();
        t.sample(&pids, &mut out);
        g.bench_function(name, |b| b.iter(|| t.sample(black_box(&pids), &mut out)));
    }
    g.finish();
    drop(kids);
}

criterion_group!(benches, listeners, procs);
criterion_main!(benches);
