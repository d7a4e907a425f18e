//! The topology families: this node's place in the network (an info gauge, only when a
//! source knows it or the prober inferred its ToR group) and whether each configured
//! topology source read. A field no source
//! gave is left out, label and all: never an empty or guessed value.

use std::fmt;

use super::family::{Labels, Render, Sink, flag};
use crate::snapshot::View;
use crate::snapshot::topology::{TopologySource, inferred_tor_name};

/// Renders the topology part of the snapshot.
#[derive(Debug, Default)]
pub struct TopologyCollector;

impl Render for TopologyCollector {
    fn render(&self, view: &View, f: &mut dyn Sink) -> fmt::Result {
        let inferred = view.probe.as_ref().and_then(|p| p.own_inferred_tor);
        let Some(t) = &view.topology else {
            return Ok(());
        };
        f.gauge(
            "hcclwatch_topology_source_up",
            "Whether each topology source in use read and was understood in the last refresh (1) or not (0, the log says why); a source that is off has no series.",
            t.sources
                .iter()
                .map(|(s, st)| (vec![("source", s.as_str().to_string())], flag(st.ok)))
                .collect(),
        )?;
        let own = t.own.clone().unwrap_or_default();
        // No source gives this node's ToR: its inferred group's name, if any.
        let (tor, source) = match (&own.place.tor, inferred) {
            (None, Some(g)) => (Some(inferred_tor_name(g)), TopologySource::Inferred),
            _ => (own.place.tor.clone(), own.source),
        };
        let known = tor.is_some() || !own.place.is_empty();
        let info = known.then(|| {
            let mut l: Labels = Vec::new();
            l.extend(tor.map(|v| ("tor", v)));
            l.extend(own.place.spine.clone().map(|v| ("spine", v)));
            l.extend(own.place.super_pod.clone().map(|v| ("super_pod", v)));
            l.push(("source", source.as_str().to_string()));
            (l, 1.0)
        });
        f.gauge(
            "hcclwatch_node_topology_info",
            "This node's place in the network (ToR, spine group, super pod) and the source of its ToR; always 1, absent while nothing is known of the node. A field that is not known is left out; source=\"inferred\" when the ToR is the group of nodes whose slowdowns moved with this node's (no source gives its ToR).",
            info.into_iter().collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::super::{Format, encode, registry};
    use crate::snapshot::Store;
    use crate::snapshot::status::BuildInfo;
    use crate::snapshot::topology::*;

    fn render(t: Option<TopologySnapshot>) -> String {
        let store = Arc::new(Store::new(false, false));
        if let Some(t) = t {
            store.publish_topology(t);
        }
        encode(&registry(store, BuildInfo::current()), Format::Text004).unwrap()
    }

    #[test]
    fn the_info_series_carries_only_known_fields_and_each_source_says_if_it_read() {
        let t = TopologySnapshot {
            node: "n1".into(),
            own: Some(NodePlace {
                place: Place {
                    tor: Some("tor-a".into()),
                    spine: None,
                    super_pod: Some("sp0".into()),
                },
                source: TopologySource::File,
            }),
            sources: BTreeMap::from([
                (
                    TopologySource::File,
                    SourceState {
                        ok: true,
                        error: None,
                        nodes: 3,
                    },
                ),
                (
                    TopologySource::NodeLabels,
                    SourceState {
                        ok: false,
                        error: Some("forbidden".into()),
                        nodes: 0,
                    },
                ),
            ]),
        };
        let s = render(Some(t));
        assert!(
            s.contains(
                "hcclwatch_node_topology_info{tor=\"tor-a\",super_pod=\"sp0\",source=\"file\"} 1.0"
            ),
            "{s}"
        );
        assert!(!s.contains("spine=\""), "{s}");
        assert!(
            s.contains("hcclwatch_topology_source_up{source=\"file\"} 1.0"),
            "{s}"
        );
        assert!(
            s.contains("hcclwatch_topology_source_up{source=\"node_labels\"} 0.0"),
            "{s}"
        );
    }

    #[test]
    fn an_inferred_tor_is_named_with_its_source_only_while_no_source_gives_one() {
        let render_with = |own: Option<NodePlace>, inferred: Option<u32>| {
            let store = Arc::new(Store::new(false, false));
            store.publish_topology(TopologySnapshot {
                node: "n1".into(),
                own,
                sources: BTreeMap::new(),
            });
            store.publish_probe(crate::snapshot::probe::ProbeSnapshot {
                own_inferred_tor: inferred,
                ..Default::default()
            });
            encode(&registry(store, BuildInfo::current()), Format::Text004).unwrap()
        };
        let s = render_with(None, Some(2));
        assert!(
            s.contains("hcclwatch_node_topology_info{tor=\"inferred-2\",source=\"inferred\"} 1.0"),
            "{s}"
        );
        // A super pod from the rank table, the ToR inferred: the ToR's source is named.
        let sp = NodePlace {
            place: Place {
                super_pod: Some("sp1".into()),
                ..Place::default()
            },
            source: TopologySource::RankTable,
        };
        let s = render_with(Some(sp), Some(0));
        assert!(
            s.contains("hcclwatch_node_topology_info{tor=\"inferred-0\",super_pod=\"sp1\",source=\"inferred\"} 1.0"),
            "{s}"
        );
        // A source's ToR is never replaced by an inference.
        let file = NodePlace {
            place: Place {
                tor: Some("tor-a".into()),
                ..Place::default()
            },
            source: TopologySource::File,
        };
        let s = render_with(Some(file), Some(0));
        assert!(
            s.contains("hcclwatch_node_topology_info{tor=\"tor-a\",source=\"file\"} 1.0"),
            "{s}"
        );
        assert!(!render_with(None, None).contains("hcclwatch_node_topology_info{"));
    }

    #[test]
    fn an_unknown_place_has_no_info_series_and_no_part_no_family() {
        let s = render(Some(TopologySnapshot::default()));
        assert!(!s.contains("hcclwatch_node_topology_info{"), "{s}");
        assert!(!render(None).contains("topology"));
    }
}
