//! The home page's Cluster table: one row per node of the cluster (this one too) with its group's memory, policy,
//! processes and requests as it last answered them, and a fleet row with their sums. A node that stopped
//! answering keeps its last figures, greyed, with how long it has been silent and why.

use crate::html::{escape, mib};
use crate::view::{Figures, FleetTotal, Peer};
use std::fmt::Write;

const HEAD: &str = "<h2>Cluster</h2><table id=\"peers\"><tr><th>node</th><th>state</th><th>memory used / limit</th>\
<th>ratio</th><th>policy</th><th>processes</th><th>requests/s</th><th>in flight</th><th>shed</th><th>answer</th></tr>";

/// The table, or nothing outside a cluster (no peers).
pub fn table(h: &mut String, peers: &[Peer]) {
    if peers.is_empty() {
        return;
    }
    h.push_str(HEAD);
    for p in peers {
        let class = if p.stale() { " class=\"stale\"" } else { "" };
        let _ = write!(
            h,
            "<tr{class} id=\"peer-{node}\"><td class=\"l\"><a href=\"{}\">{node}</a>{}</td><td class=\"l\">{}</td>",
            escape(&p.url),
            if p.this { " (this node)" } else { "" },
            escape(&p.state),
            node = escape(&p.node),
        );
        // Without figures, the ratio and the policy the node last gossiped.
        let ratio = p.figures.as_ref().map(|f| f.ratio).or(p.memory_ratio);
        let policy = p.figures.as_ref().map(|f| f.policy.as_str()).or(p.policy.as_deref());
        figures(h, p.figures.as_ref(), ratio, policy);
        let answer = match (p.this, p.stale(), p.figures_age_s) {
            (true, _, _) => "this node".to_string(),
            (false, true, _) => format!(
                "<span class=\"err\">no answer since {:.0}s: {}</span>",
                p.no_answer_s.unwrap_or(0.0),
                escape(p.error.as_deref().unwrap_or("not asked"))
            ),
            (false, false, Some(age)) => format!("{age:.1} s ago"),
            (false, false, None) => "not asked yet".to_string(),
        };
        let _ = write!(h, "<td class=\"l\">{answer}</td></tr>");
    }
    let t = FleetTotal::of(peers);
    let _ = write!(
        h,
        "<tr class=\"total\" id=\"fleet\"><td class=\"l\">fleet</td><td class=\"l\">{} of {} answering</td>",
        t.answering, t.nodes
    );
    let f = (t.answering > 0).then_some(&t.figures);
    figures(h, f, f.map(|f| f.ratio), f.map(|f| f.policy.as_str()));
    h.push_str("<td></td></tr></table>");
}

/// The cells from memory to shed; `–` for what is not known.
fn figures(h: &mut String, f: Option<&Figures>, ratio: Option<f64>, policy: Option<&str>) {
    let dash = || "–".to_string();
    let memory = f.map(|f| format!("{} / {}", mib(f.usage_bytes), mib(f.limit_bytes))).unwrap_or_else(dash);
    let ratio = ratio.map(|r| format!("{:.1}%", r * 100.0)).unwrap_or_else(dash);
    let processes = f
        .map(|f| match f.ready {
            Some(r) => format!("{} ({r} ready)", f.processes),
            None => f.processes.to_string(),
        })
        .unwrap_or_else(dash);
    let rate = f.and_then(|f| f.requests_per_s).map(|r| format!("{r:.1}")).unwrap_or_else(dash);
    let inflight = f.map(|f| f.inflight.to_string()).unwrap_or_else(dash);
    let shed = f.and_then(|f| f.shed_total).map(|s| s.to_string()).unwrap_or_else(dash);
    let _ = write!(
        h,
        "<td>{memory}</td><td>{ratio}</td><td class=\"l\">{}</td><td>{processes}</td><td>{rate}</td>\
         <td>{inflight}</td><td>{shed}</td>",
        escape(policy.unwrap_or("–")),
    );
}

#[cfg(test)]
mod tests {
    use crate::page::render;
    use crate::view::{Dashboard, Figures, Peer};

    fn figures(usage_mib: u64, policy: &str, requests_per_s: Option<f64>) -> Figures {
        Figures {
            usage_bytes: usage_mib << 20,
            limit_bytes: 1024 << 20,
            ratio: usage_mib as f64 / 1024.0,
            policy: policy.into(),
            processes: 3,
            ready: Some(2),
            requests_total: 1200,
            requests_per_s,
            inflight: 4,
            shed_total: Some(7),
        }
    }

    fn peer(node: &str, this: bool, figures: Option<Figures>) -> Peer {
        Peer {
            node: node.into(),
            state: "alive".into(),
            url: format!("http://10.0.0.{}:9464/", node.len()),
            memory_ratio: Some(0.1),
            policy: Some("normal".into()),
            this,
            figures_age_s: figures.as_ref().map(|_| 0.5),
            figures,
            ..Peer::default()
        }
    }

    /// The row of `node` in the page.
    fn row<'a>(page: &'a str, node: &str) -> &'a str {
        let start = page.find(&format!("id=\"peer-{node}\"")).unwrap_or_else(|| panic!("no row {node}: {page}"));
        let len = page[start..].find("</tr>").unwrap_or(0);
        &page[start..start + len]
    }

    fn fleet_row(page: &str) -> &str {
        let start = page.find("id=\"fleet\"").unwrap_or_else(|| panic!("no fleet row: {page}"));
        let len = page[start..].find("</tr>").unwrap_or(0);
        &page[start..start + len]
    }

    #[test]
    fn no_cluster_no_section() {
        let page = render(&Dashboard::default());
        assert!(!page.contains("id=\"peers\"") && !page.contains("<h2>Cluster"), "{page}");
    }

    #[test]
    fn a_node_with_figures_shows_its_memory_policy_processes_and_requests() {
        let d = Dashboard {
            peers: vec![
                peer("a", true, Some(figures(256, "normal", Some(12.5)))),
                peer("b<", false, Some(figures(768, "refusing", Some(2.0)))),
            ],
            ..Dashboard::default()
        };
        let page = render(&d);
        let a = row(&page, "a");
        assert!(a.contains("<a href=\"http://10.0.0.1:9464/\">a</a> (this node)"), "{a}");
        assert!(a.contains("<td>256.0 MiB / 1024.0 MiB</td><td>25.0%</td><td class=\"l\">normal</td>"), "{a}");
        assert!(a.contains("<td>3 (2 ready)</td><td>12.5</td><td>4</td><td>7</td>"), "{a}");
        assert!(a.contains("this node") && !a.contains("stale"), "{a}");
        let b = row(&page, "b&lt;");
        assert!(b.contains(">b&lt;</a></td><td class=\"l\">alive</td>") && b.contains("refusing"), "{b}");
        assert!(b.contains("<td>75.0%</td>") && b.contains("0.5 s ago"), "{b}");
        let fleet = fleet_row(&page);
        assert!(fleet.contains("2 of 2 answering"), "{fleet}");
        assert!(
            fleet.contains("<td>1024.0 MiB / 2048.0 MiB</td><td>50.0%</td><td class=\"l\">refusing</td>"),
            "{fleet}"
        );
        assert!(fleet.contains("<td>6 (4 ready)</td><td>14.5</td><td>8</td><td>14</td>"), "{fleet}");
    }

    #[test]
    fn a_node_that_does_not_answer_keeps_its_last_figures_greyed_with_why() {
        let mut b = peer("b", false, Some(figures(512, "normal", Some(3.0))));
        b.no_answer_s = Some(6.2);
        b.error = Some("connecting to 10.0.0.6:9464: Connection refused <os error 111>".into());
        let mut c = peer("c", false, None);
        c.state = "dead".into();
        (c.memory_ratio, c.policy) = (None, None);
        c.no_answer_s = Some(9.0);
        c.error = Some("no answer within 1 s".into());
        let d = Dashboard {
            peers: vec![peer("a", true, Some(figures(256, "normal", None))), b, c],
            ..Dashboard::default()
        };
        let page = render(&d);
        let b = row(&page, "b");
        assert!(b.starts_with("id=\"peer-b\"") && page.contains("<tr class=\"stale\" id=\"peer-b\">"), "{page}");
        assert!(b.contains("<td>512.0 MiB / 1024.0 MiB</td>"), "the last figures stay: {b}");
        assert!(
            b.contains("no answer since 6s: connecting to 10.0.0.6:9464: Connection refused &lt;os error 111&gt;"),
            "{b}"
        );
        let c = row(&page, "c");
        assert!(c.contains("<td class=\"l\">dead</td><td>–</td><td>–</td>"), "{c}");
        assert!(c.contains("no answer since 9s: no answer within 1 s"), "{c}");
        let fleet = fleet_row(&page);
        assert!(fleet.contains("1 of 3 answering") && fleet.contains("<td>256.0 MiB / 1024.0 MiB</td>"), "{fleet}");
    }

    #[test]
    fn a_peer_of_an_older_node_parses_without_figures() {
        let old = r#"{"node":"b","state":"alive","url":"http://b/","memory_ratio":0.5,"policy":"normal","this":false}"#;
        let p: Peer = serde_json::from_str(old).expect("an older peer document");
        assert_eq!((p.stale(), p.figures, p.error), (false, None, None));
    }
}
