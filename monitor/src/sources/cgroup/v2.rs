//! cgroup v2 memory controller: usage is `memory.stat anon`; the limit is the smallest `memory.max` from the
//! group up to the hierarchy's root (`max` = none); `memory.oom.group` says whether a kernel OOM kill takes the whole
//! group.

use std::path::{Path, PathBuf};

/// The value of `key` in a flat keyed file (`key value` lines). None if the key is absent; an error if its value is
/// not a non-negative integer. The first occurrence wins.
pub fn keyed(text: &str, key: &str) -> Result<Option<u64>, String> {
    for line in text.lines() {
        let mut it = line.split_ascii_whitespace();
        if it.next() == Some(key) {
            let v = it.next().ok_or_else(|| format!("{key} has no value"))?;
            return v.parse().map(Some).map_err(|_| format!("{key} is not a number: {v:?}"));
        }
    }
    Ok(None)
}

/// The `total=` of the `some` and `full` lines of a PSI file (`memory.pressure`):
/// `some avg10=0.00 avg60=0.00 avg300=0.00 total=1234`.
pub(crate) fn parse_pressure(text: &str) -> Result<crate::decision::snapshot::Pressure, String> {
    let total = |kind: &str| -> Result<u64, String> {
        let line = text.lines().find(|l| l.split_ascii_whitespace().next() == Some(kind));
        let line = line.ok_or_else(|| format!("no {kind} line"))?;
        let v = line.split_ascii_whitespace().find_map(|w| w.strip_prefix("total="));
        let v = v.ok_or_else(|| format!("{kind} has no total"))?;
        v.parse().map_err(|_| format!("{kind} total is not a number: {v:?}"))
    };
    Ok(crate::decision::snapshot::Pressure { some_us: total("some")?, full_us: total("full")? })
}

/// The `anon` value of a v2 `memory.stat`.
pub fn parse_anon(text: &str) -> Result<u64, String> {
    keyed(text, "anon")?.ok_or_else(|| "no anon line".to_string())
}

/// The `shmem` value of a v2 `memory.stat` (tmpfs, shared memory, shared anonymous mappings), 0 when absent.
pub(crate) fn parse_shmem(text: &str) -> Result<u64, String> {
    Ok(keyed(text, "shmem")?.unwrap_or(0))
}

/// The kernel memory of a v2 `memory.stat` that reclaim does not free: `kernel` (Linux 5.18 on: page tables,
/// kernel stacks, slab, per-cpu and vmalloc memory, sockets…) less `slab_reclaimable` (the dentry and inode caches
/// reclaim shrinks); before 5.18 the sum of `kernel_stack`, `pagetables`, `sec_pagetables`, `percpu`, `sock`,
/// `vmalloc` and `slab_unreclaimable`. Each key is 0 when absent.
pub(crate) fn parse_kernel(text: &str) -> Result<u64, String> {
    if let Some(kernel) = keyed(text, "kernel")? {
        return Ok(kernel.saturating_sub(keyed(text, "slab_reclaimable")?.unwrap_or(0)));
    }
    let parts = ["kernel_stack", "pagetables", "sec_pagetables", "percpu", "sock", "vmalloc", "slab_unreclaimable"];
    parts.iter().try_fold(0u64, |sum, k| Ok(sum.saturating_add(keyed(text, k)?.unwrap_or(0))))
}

/// A `memory.max` file: a number of bytes, or `max` for none.
pub fn parse_memory_max(text: &str) -> Result<Option<u64>, String> {
    match text.trim() {
        "max" => Ok(None),
        t => t.parse().map(Some).map_err(|_| format!("memory.max is neither a number nor max: {t:?}")),
    }
}

/// A `memory.oom.group` file: `1` when the kernel's OOM killer kills the whole group at once, `0` when it kills
/// one process.
pub(crate) fn parse_oom_group(text: &str) -> Result<bool, String> {
    match text.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        t => Err(format!("memory.oom.group is neither 0 nor 1: {t:?}")),
    }
}

/// The group `dir`'s `memory.oom.group`; None when the file is missing (a kernel before 4.19), unreadable or not
/// understood.
pub(crate) fn read_oom_group(dir: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(dir.join("memory.oom.group")).ok()?;
    parse_oom_group(&text).ok()
}

/// The smaller of two optional limits (None = unlimited).
pub(crate) fn min_limit(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// The group's directory and each ancestor up to `mount`, the mount included: on a host it is the root cgroup,
/// which has no `memory.max`, but inside a cgroup namespace (a container) it is the container's group, whose
/// `memory.max` is the container's limit.
pub(crate) fn dirs_up_to(dir: &Path, mount: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut cur = Some(dir);
    while let Some(d) = cur.filter(|d| d.starts_with(mount)) {
        out.push(d.to_path_buf());
        if d == mount {
            break;
        }
        cur = d.parent();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pressure_totals_from_a_psi_file() {
        // The format of a cgroup v2 memory.pressure file (the kernel's Documentation/accounting/psi.rst).
        let text = "some avg10=1.25 avg60=0.40 avg300=0.09 total=5234712\nfull avg10=0.00 avg60=0.02 avg300=0.00 total=81230\n";
        let p = parse_pressure(text).expect("a PSI file");
        assert_eq!((p.some_us, p.full_us), (5_234_712, 81_230));
        assert!(parse_pressure("some avg10=0.00 total=1\n").is_err(), "no full line");
        assert!(parse_pressure("some total=x\nfull total=1\n").is_err());
    }

    #[test]
    fn anon_from_fixture() {
        let t = include_str!("../../../../tests/fixtures/v2/nested/system.slice/app.service/workers/memory.stat");
        assert_eq!(parse_anon(t), Ok(41996288));
        // `anon_thp` and `inactive_anon` must not be mistaken for `anon`.
        assert_eq!(parse_anon("anon_thp 5\ninactive_anon 7\nanon 9\n"), Ok(9));
        assert!(parse_anon("anon_thp 5\n").is_err());
        assert!(parse_anon("anon\n").is_err());
    }

    #[test]
    fn kernel_memory_from_fixture() {
        let t = include_str!("../../../../tests/fixtures/v2/nested/system.slice/app.service/workers/memory.stat");
        // kernel 1212416 less slab_reclaimable 438208.
        assert_eq!(parse_kernel(t), Ok(774_208));
        // Before `kernel` was reported: its unreclaimable parts.
        let old = "anon 9\nkernel_stack 16384\npagetables 8192\nslab_reclaimable 4096\nslab_unreclaimable 1024\n";
        assert_eq!(parse_kernel(old), Ok(16384 + 8192 + 1024));
        assert_eq!(parse_kernel("anon 9\n"), Ok(0));
        assert!(parse_kernel("kernel x\n").is_err());
    }

    #[test]
    fn oom_group_from_fixtures() {
        let nested = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/v2/nested/system.slice");
        assert_eq!(read_oom_group(&nested.join("app.service")), Some(true));
        assert_eq!(read_oom_group(&nested.join("app.service/workers")), Some(false));
        assert_eq!(read_oom_group(&nested), None, "no file: not known");
        assert_eq!(parse_oom_group("1\n"), Ok(true));
        assert!(parse_oom_group("").is_err());
        assert!(parse_oom_group("2\n").is_err());
    }

    #[test]
    fn memory_max_values() {
        assert_eq!(parse_memory_max("max\n"), Ok(None));
        assert_eq!(parse_memory_max("536870912\n"), Ok(Some(512 << 20)));
        assert!(parse_memory_max("").is_err());
        assert!(parse_memory_max("12k").is_err());
    }

    #[test]
    fn smallest_limit_wins() {
        assert_eq!(min_limit(None, None), None);
        assert_eq!(min_limit(Some(5), None), Some(5));
        assert_eq!(min_limit(None, Some(5)), Some(5));
        assert_eq!(min_limit(Some(7), Some(5)), Some(5));
    }

    #[test]
    fn walk_ends_at_the_mount() {
        let d = dirs_up_to(Path::new("/sys/fs/cgroup/a/b"), Path::new("/sys/fs/cgroup"));
        let want = ["/sys/fs/cgroup/a/b", "/sys/fs/cgroup/a", "/sys/fs/cgroup"].map(PathBuf::from);
        assert_eq!(d, want);
        let ns_root = dirs_up_to(Path::new("/sys/fs/cgroup"), Path::new("/sys/fs/cgroup"));
        assert_eq!(ns_root, [PathBuf::from("/sys/fs/cgroup")]);
        assert!(dirs_up_to(Path::new("/elsewhere"), Path::new("/sys/fs/cgroup")).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") {
            let _ = parse_anon(&s);
            let _ = parse_memory_max(&s);
            let _ = parse_oom_group(&s);
            let _ = keyed(&s, "x");
        }
    }
}
