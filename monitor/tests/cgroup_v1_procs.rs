//! The group's process list on cgroup v1 follows processes joining and leaving from one read to the next. v1's
//! `cgroup.procs` hands an open file the pid list built at its first read for as long as it is re-read within a
//! second, so the reader opens the file for each read (the agent listed a new process up to a second late, at its
//! next rescan).

use monitor::decision::snapshot::CgroupVersion;
use monitor::sources::cgroup::{Group, GroupReader};
use monitor_tests::{require_v1, spawn_in_cgroup, CgroupV1};
use std::process::{Command, Stdio};

#[test]
fn v1_pids_see_a_process_join_and_leave_at_once() {
    let test = "v1_pids_see_a_process_join_and_leave_at_once";
    if !require_v1(test) {
        return;
    }
    let cg = CgroupV1::create("pids-fresh", Some(64 << 20));
    let mount = cg.path().parent().unwrap_or_else(|| panic!("{} has no parent", cg.path().display())).to_path_buf();
    let group = Group { version: CgroupVersion::V1, dir: cg.path().to_path_buf(), mount };
    let mut reader = GroupReader::open(group).unwrap_or_else(|e| panic!("open: {e}"));
    let mut pids = Vec::new();
    reader.pids(&mut pids).unwrap_or_else(|e| panic!("pids: {e}"));
    assert_eq!(pids, Vec::<u32>::new(), "a new group is empty");
    let mut child = spawn_in_cgroup(Command::new("sleep").arg("30").stdin(Stdio::null()), cg.path());
    reader.pids(&mut pids).unwrap_or_else(|e| panic!("pids: {e}"));
    assert_eq!(pids, vec![child.pid()], "the process that joined, at the next read");
    child.kill();
    reader.pids(&mut pids).unwrap_or_else(|e| panic!("pids: {e}"));
    assert_eq!(pids, Vec::<u32>::new(), "the process that left, at the next read");
}
