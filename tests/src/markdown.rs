//! Reading our Markdown docs: the anchor GitHub gives a heading, which links into docs/benchmarks.md name (the page's
//! generator in xtask writes its sections' links with it, and the docs check follows them).

/// GitHub's anchor for a heading: lower case, spaces to dashes, other punctuation dropped.
pub fn anchor(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::anchor;

    #[test]
    fn anchors_are_githubs() {
        assert_eq!(anchor("Front door: instructions per request"), "front-door-instructions-per-request");
        assert_eq!(anchor("eBPF probes"), "ebpf-probes");
        assert_eq!(anchor("Cluster: forwarding and gossip"), "cluster-forwarding-and-gossip");
        assert_eq!(anchor("`monitor run` under every load at once"), "monitor-run-under-every-load-at-once");
    }
}
