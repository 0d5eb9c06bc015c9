//! `/proc/self/mountinfo`, `/proc/self/cgroup` and a `--cgroup` spec, split from one input at NUL bytes: finding
//! the group never panics, and a group found always lies inside the mount it names.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::sources::cgroup::{locate, mounts, Mounts};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut parts = text.splitn(3, '\0');
    let (mountinfo, own, spec) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let m = Mounts::parse(mountinfo);
    let _ = mounts::parse_proc_cgroup(own);
    if let Ok(g) = locate(spec, &m, own) {
        assert!(g.dir.is_absolute(), "{g:?}");
        if spec != "auto" && !std::path::Path::new(spec).is_absolute() {
            assert!(g.dir.starts_with(&g.mount) || spec.contains(".."), "{g:?} from {spec:?}");
        }
    }
});
