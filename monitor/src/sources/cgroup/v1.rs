//! cgroup v1 memory controller: `memory.stat` gives the hierarchical usage (`total_rss`, plus `total_shmem`) and
//! limit (`hierarchical_memory_limit`) in one file; `memory.kmem.usage_in_bytes` the kernel memory charged to the
//! same limit.

/// Values at or above this mean "no limit" (the kernel reports PAGE_COUNTER_MAX in bytes, ~2^63).
pub const UNLIMITED_FROM: u64 = 1 << 60;

/// What the agent needs from a v1 `memory.stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V1Stat {
    /// Anonymous and swap-cache memory of the group and its descendants, THP included (`total_rss`).
    pub total_rss: u64,
    /// tmpfs, shared memory and shared anonymous mappings of the group and its descendants (`total_shmem`; 0 on
    /// kernels that do not report it): charged to the limit, and no reclaim frees it without swap.
    pub total_shmem: u64,
    /// `hierarchical_memory_limit`, None when unlimited.
    pub limit_bytes: Option<u64>,
}

/// Parses a v1 `memory.stat`. Both keys are required.
pub fn parse_memory_stat(text: &str) -> Result<V1Stat, String> {
    let total_rss = super::v2::keyed(text, "total_rss")?.ok_or("no total_rss line")?;
    let limit = super::v2::keyed(text, "hierarchical_memory_limit")?.ok_or("no hierarchical_memory_limit line")?;
    let total_shmem = super::v2::keyed(text, "total_shmem")?.unwrap_or(0);
    Ok(V1Stat { total_rss, total_shmem, limit_bytes: (limit < UNLIMITED_FROM).then_some(limit) })
}

/// A v1 `memory.kmem.usage_in_bytes`: the kernel memory charged to the group and its descendants (page tables,
/// kernel stacks, slab…), which counts toward `memory.limit_in_bytes`.
pub fn parse_kmem(text: &str) -> Result<u64, String> {
    let t = text.trim();
    t.parse().map_err(|_| format!("memory.kmem.usage_in_bytes is not a number: {t:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_memory_of_a_thousand_sleeping_processes() {
        // Captured from a group of 1,000 `sleep` processes: 64 MB of kernel memory beside 111 MB of total_rss.
        let kmem = include_str!("../../../../tests/fixtures/v1/crowd.memory.kmem.usage_in_bytes");
        assert_eq!(parse_kmem(kmem), Ok(64_364_544));
        let stat = parse_memory_stat(include_str!("../../../../tests/fixtures/v1/crowd.memory.stat"));
        assert_eq!(stat.map(|s| s.total_rss), Ok(111_427_584));
        assert!(parse_kmem("").is_err());
        assert!(parse_kmem("-1\n").is_err());
    }

    #[test]
    fn captured_child_with_limit() {
        // Captured on this project's host: a python process holding a touched 64 MiB bytearray (RssAnon 72408 kB).
        let s =
            parse_memory_stat(include_str!("../../../../tests/fixtures/v1/child-limited.memory.stat")).expect("parse");
        assert_eq!(s, V1Stat { total_rss: 72408 * 1024, total_shmem: 0, limit_bytes: Some(128 << 20) });
        let p =
            parse_memory_stat(include_str!("../../../../tests/fixtures/v1/parent-limited.memory.stat")).expect("parse");
        assert_eq!(p.limit_bytes, Some(256 << 20));
    }

    #[test]
    fn captured_root_is_unlimited() {
        let s = parse_memory_stat(include_str!("../../../../tests/fixtures/v1/root.memory.stat")).expect("parse");
        assert_eq!(s.limit_bytes, None);
        assert_eq!(s.total_rss, 83378176);
    }

    #[test]
    fn missing_or_bad_keys_are_errors() {
        assert!(parse_memory_stat("").is_err());
        assert!(parse_memory_stat("total_rss 5\n").is_err());
        assert!(parse_memory_stat("total_rss x\nhierarchical_memory_limit 1\n").is_err());
        assert!(parse_memory_stat("total_rss -5\nhierarchical_memory_limit 1\n").is_err());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") {
            let _ = parse_memory_stat(&s);
        }

        #[test]
        fn reads_back_any_values(rss in 0u64.., limit in 0u64..) {
            let text = format!("cache 1\nrss 2\nhierarchical_memory_limit {limit}\ntotal_rss {rss}\n");
            let s = parse_memory_stat(&text).expect("parse");
            proptest::prop_assert_eq!(s.total_rss, rss);
            proptest::prop_assert_eq!(s.limit_bytes, (limit < UNLIMITED_FROM).then_some(limit));
        }
    }
}
