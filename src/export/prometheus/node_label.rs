//! `web.node_label`: a `node` label on every series of the exposition, so that a query
//! can select one node's series without scrape relabelling (HAMi-WebUI, for one, asks
//! for `npu_chip_info_health_status{node="…"}`).
//!
//! Some families already have a `node` label of their own: the probe and device-plane
//! families name a peer member with it. On those the existing label is renamed
//! `exported_node`, as Prometheus itself renames a scraped label that clashes with a
//! target label (`honor_labels: false`), and `node` is this node.

use std::fmt;

use super::family::{Labels, Sink};
use crate::snapshot::histogram::Histogram;

/// The label a clashing `node` label is renamed to.
pub const EXPORTED_NODE: &str = "exported_node";

/// A sink that adds `node="<name>"` to every series before passing it on.
pub struct NodeLabelSink<'a> {
    inner: &'a mut dyn Sink,
    node: &'a str,
}

impl<'a> NodeLabelSink<'a> {
    /// Wraps `inner` so every series gets `node="<node>"`.
    pub fn new(inner: &'a mut dyn Sink, node: &'a str) -> Self {
        Self { inner, node }
    }

    fn label<T>(&self, mut series: Vec<(Labels, T)>) -> Vec<(Labels, T)> {
        for (l, _) in &mut series {
            for (k, _) in l.iter_mut() {
                if *k == "node" {
                    *k = EXPORTED_NODE;
                }
            }
            l.push(("node", self.node.to_string()));
        }
        series
    }
}

impl Sink for NodeLabelSink<'_> {
    fn gauge(&mut self, name: &str, help: &str, series: Vec<(Labels, f64)>) -> fmt::Result {
        let series = self.label(series);
        self.inner.gauge(name, help, series)
    }

    fn counter(&mut self, name: &str, help: &str, series: Vec<(Labels, u64)>) -> fmt::Result {
        let series = self.label(series);
        self.inner.counter(name, help, series)
    }

    fn histogram(
        &mut self,
        name: &str,
        help: &str,
        series: Vec<(Labels, &Histogram)>,
    ) -> fmt::Result {
        let series = self.label(series);
        self.inner.histogram(name, help, series)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::prometheus::{Format, Options, encode, registry, registry_with};
    use crate::snapshot::status::BuildInfo;

    /// Every sample of the full exposition (every domain, the probe families with their
    /// own `node` label included) carries exactly one `node` label, with this node's name;
    /// a peer's `node` moved to `exported_node`.
    #[test]
    fn every_sample_carries_this_node_once() {
        use crate::snapshot::probe::{MemberView, ProbeSnapshot};
        let store = crate::snapshot::fixture::store(2);
        // A probe group: its member families name each peer with a `node` label.
        store.publish_probe(ProbeSnapshot {
            active: true,
            rounds_ok: 1,
            members: vec![MemberView {
                up: true,
                ..MemberView::new("peer-3")
            }],
            ..ProbeSnapshot::default()
        });
        let options = Options {
            node_label: Some("gpu-7".into()),
            ..Options::default()
        };
        let text = encode(
            &registry_with(store.clone(), BuildInfo::current(), &options),
            Format::Text004,
        )
        .unwrap();
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(samples.len() > 100, "only {} samples", samples.len());
        for line in &samples {
            assert_eq!(line.matches("node=\"gpu-7\"").count(), 1, "{line}");
            assert_eq!(
                line.matches(",node=").count() + line.matches("{node=").count(),
                1
            );
        }
        let plain = encode(&registry(store, BuildInfo::current()), Format::Text004).unwrap();
        let peers = plain
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains("node=\""))
            .count();
        assert!(
            peers > 0,
            "no family with a node label of its own:\n{plain}"
        );
        assert_eq!(
            samples
                .iter()
                .filter(|l| l.contains("exported_node=\""))
                .count(),
            peers
        );
    }

    /// The wrapper renames a clashing label and adds the node to series with no labels.
    #[test]
    fn a_clashing_node_label_is_renamed() {
        #[derive(Default)]
        struct Rec(Vec<Labels>);
        impl Sink for Rec {
            fn gauge(&mut self, _: &str, _: &str, s: Vec<(Labels, f64)>) -> fmt::Result {
                self.0.extend(s.into_iter().map(|(l, _)| l));
                Ok(())
            }
            fn counter(&mut self, _: &str, _: &str, s: Vec<(Labels, u64)>) -> fmt::Result {
                self.0.extend(s.into_iter().map(|(l, _)| l));
                Ok(())
            }
            fn histogram(&mut self, _: &str, _: &str, s: Vec<(Labels, &Histogram)>) -> fmt::Result {
                self.0.extend(s.into_iter().map(|(l, _)| l));
                Ok(())
            }
        }
        let mut rec = Rec::default();
        let mut sink = NodeLabelSink::new(&mut rec, "n1");
        sink.gauge(
            "g",
            "",
            vec![
                (vec![], 1.0),
                (vec![("node", "peer-3".into()), ("npu", "0".into())], 1.0),
            ],
        )
        .unwrap();
        sink.counter("c", "", vec![(vec![("npu", "1".into())], 1)])
            .unwrap();
        assert_eq!(
            rec.0,
            vec![
                vec![("node", "n1".to_string())],
                vec![
                    (EXPORTED_NODE, "peer-3".to_string()),
                    ("npu", "0".to_string()),
                    ("node", "n1".to_string())
                ],
                vec![("npu", "1".to_string()), ("node", "n1".to_string())],
            ]
        );
    }
}
