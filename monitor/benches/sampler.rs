//! One full sample of a 16-process group against the raw `pread` cost of the same files, measured in the same
//! run (`cargo xtask bench sampler`). Needs root (it creates a v1 memory cgroup); otherwise it says why and stops.

use criterion::{criterion_group, criterion_main, Criterion};
use monitor::base::kernfile::pread_all;
use monitor::decision::snapshot::CgroupVersion;
use monitor::sampler::Sampler;
use monitor::sources::cgroup::Group;
use monitor_tests::{spawn_in_cgroup, CgroupV1, ChildGuard};
use std::fs::File;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

const PROCESSES: usize = 16;

fn bench(c: &mut Criterion) {
    if let Some(reason) = CgroupV1::unavailable_reason() {
        eprintln!("skipping sampler benchmark: {reason}");
        return;
    }
    let cg = CgroupV1::create("bench-sampler", Some(1 << 30));
    let children: Vec<ChildGuard> =
        (0..PROCESSES).map(|_| spawn_in_cgroup(Command::new("sleep").arg("600"), cg.path())).collect();
    let group = Group {
        version: CgroupVersion::V1,
        dir: cg.path().to_path_buf(),
        mount: PathBuf::from("/sys/fs/cgroup/memory"),
    };
    let mut sampler = Sampler::new(group, None, Err("not in this benchmark".into())).expect("open group");
    let first = sampler.sample().expect("sample");
    assert_eq!(first.processes.len(), PROCESSES, "all {PROCESSES} processes must be sampled");

    // The same files the sampler reads, opened once, read with pread: the floor a sample cannot go under.
    let mut files: Vec<File> = vec![open(&cg.path().join("memory.stat")), open(&cg.path().join("cgroup.procs"))];
    for ch in &children {
        let dir = Path::new("/proc").join(ch.pid().to_string());
        files.push(open(&dir.join("statm")));
    }
    let mut buf = Vec::with_capacity(8192);
    let mut g = c.benchmark_group("sampler-16");
    g.bench_function("raw-pread", |b| {
        b.iter(|| {
            for f in &files {
                pread_all(f, &mut buf).expect("pread");
                black_box(&buf);
            }
        })
    });
    g.bench_function("full-sample", |b| b.iter(|| black_box(sampler.sample_all().expect("sample"))));
    g.finish();
    drop(children);
}

fn open(p: &Path) -> File {
    File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

criterion_group!(benches, bench);
criterion_main!(benches);
