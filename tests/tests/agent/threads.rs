//! Memory is read where it lives: a process whose main thread has exited while another thread holds its memory
//! (the `thread-holder` fixture) is sampled by the agent's process table with that memory, under its leader's pid.

use monitor::sources::procs::ProcTable;
use monitor_tests::hog::ThreadHolder;
use monitor_tests::MIB;

const HOLDER: &str = env!("CARGO_BIN_EXE_thread-holder");

#[test]
fn a_process_whose_main_thread_exited_is_sampled_with_its_memory() {
    let holder = ThreadHolder::spawn(HOLDER, None, 64, &[]);
    let pid = holder.pid();
    let leader = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap_or_default();
    assert!(leader.starts_with("0 0 0 "), "the leader has no memory: {leader:?}");
    let mut table = ProcTable::new();
    let mut out = Vec::new();
    for budget in [usize::MAX, 0] {
        table.set_keep_budget(budget);
        for _ in 0..2 {
            table.sample(&[pid], &mut out);
            assert_eq!(out.len(), 1, "sampled, not left out: {out:?}");
            let p = &out[0];
            assert_eq!((p.pid, p.name.as_str()), (pid, "thread-holder"), "the leader's pid and name: {p:?}");
            assert!(p.anon_bytes >= holder.bytes() && p.rss_bytes >= p.anon_bytes, "{} MiB: {p:?}", p.anon_bytes / MIB);
        }
        // A new table for the next budget: the entry opened under it decides how it is read.
        table = ProcTable::new();
    }
}
