//! The operator-override families: the overrides that hold on this node and its NPUs (set
//! with `hcclwatch override`, read from the node's annotations), and whether they could be
//! read. Only overrides that hold are exported; one that ended has no series.

use std::fmt;

use super::family::{Labels, Render, Sink, flag};
use crate::snapshot::View;

/// Renders the overrides part of the snapshot.
#[derive(Debug, Default)]
pub struct OverridesCollector;

impl Render for OverridesCollector {
    fn render(&self, view: &View, f: &mut dyn Sink) -> fmt::Result {
        let Some(o) = &view.overrides else {
            return Ok(());
        };
        f.gauge(
            "hcclwatch_override_source_up",
            "Whether this node's override annotations were read in the last attempt (1) or not (0: no override is applied, the log says why).",
            vec![(vec![], flag(o.error.is_none()))],
        )?;
        let mut series: Vec<(Labels, f64)> = Vec::new();
        if let Some(n) = &o.active.node {
            series.push((
                vec![
                    ("node", o.node.clone()),
                    ("entity", "node".to_string()),
                    ("state", n.state.as_str().to_string()),
                ],
                1.0,
            ));
        }
        for (npu, n) in &o.active.npus {
            series.push((
                vec![
                    ("node", o.node.clone()),
                    ("entity", "npu".to_string()),
                    ("npu", npu.to_string()),
                    ("state", n.state.as_str().to_string()),
                ],
                1.0,
            ));
        }
        f.gauge(
            "hcclwatch_override",
            "1 for each operator override that holds on this node (entity=\"node\") or one of its NPUs (entity=\"npu\"), by the state it holds (healthy or quarantined); hcclwatch override sets it, docs/overrides.md.",
            series,
        )
    }
}
