//! The daemon's own families: build, configuration checks, OTLP export outcomes and how
//! each collector's last run went.

use super::family::{Render, Sink, flag, unix_seconds};
use crate::snapshot::View;
use crate::snapshot::status::{BuildInfo, CollectorStatus};
use std::fmt;

/// Renders [`crate::snapshot::status::SelfSnapshot`] and the collector statuses of the
/// NPU, host and port parts.
#[derive(Debug)]
pub struct StatusCollector {
    build: BuildInfo,
}

impl StatusCollector {
    /// A collector reporting `build`.
    pub fn new(build: BuildInfo) -> Self {
        Self { build }
    }

    fn build_and_config(&self, view: &View, f: &mut dyn Sink) -> fmt::Result {
        f.gauge(
            "hcclwatch_build_info",
            "Build metadata of the running hcclwatch; always 1.",
            vec![(
                vec![
                    ("version", self.build.version.to_string()),
                    ("revision", self.build.revision.to_string()),
                    ("build_date", self.build.build_date.to_string()),
                ],
                1.0,
            )],
        )?;
        let status = &view.status;
        if let Some(r) = status.reload {
            f.gauge(
                "hcclwatch_config_last_reload_successful",
                "Whether the last configuration check (start-up or SIGHUP) loaded and validated the file.",
                vec![(vec![], flag(r.ok))],
            )?;
            f.gauge(
                "hcclwatch_config_last_reload_success_timestamp_seconds",
                "Unix time of the last configuration check that passed.",
                r.last_success
                    .map(|t| (vec![], unix_seconds(t)))
                    .into_iter()
                    .collect(),
            )?;
        }
        if let Some(p) = &status.push {
            push(p, f)?;
        }
        if let Some(o) = status.otlp {
            let mut signals = vec![("metrics", o.metrics)];
            if let Some(t) = o.traces {
                signals.push(("traces", t));
            }
            let signal = |s: &str| vec![("signal", s.to_string())];
            f.counter(
                "hcclwatch_otlp_exports",
                "OTLP export attempts by signal (each after its retries).",
                signals
                    .iter()
                    .map(|(s, r)| (signal(s), r.exports))
                    .collect(),
            )?;
            f.counter(
                "hcclwatch_otlp_export_failures",
                "OTLP exports that failed after their retries, by signal.",
                signals
                    .iter()
                    .map(|(s, r)| (signal(s), r.failures))
                    .collect(),
            )?;
            f.gauge(
                "hcclwatch_otlp_last_success_timestamp_seconds",
                "Unix time of the last successful OTLP export, by signal.",
                signals
                    .iter()
                    .filter_map(|(s, r)| r.last_success.map(|t| (signal(s), t)))
                    .collect(),
            )?;
        }
        Ok(())
    }

    fn collectors(&self, view: &View, f: &mut dyn Sink) -> fmt::Result {
        let mut statuses: Vec<CollectorStatus> = view.npu.collectors.values().cloned().collect();
        if let Some(h) = &view.host.collector {
            statuses.push(h.clone());
        }
        if let Some(p) = &view.ports {
            statuses.extend(p.collectors.values().cloned());
        }
        let collector = |s: &CollectorStatus| vec![("collector", s.name.clone())];
        f.gauge(
            "hcclwatch_scrape_collector_success",
            "Whether the collector's last run read everything it tried (1) or not (0).",
            statuses
                .iter()
                .map(|s| (collector(s), flag(s.success)))
                .collect(),
        )?;
        f.gauge(
            "hcclwatch_scrape_collector_duration_seconds",
            "How long the collector's last run took.",
            statuses
                .iter()
                .map(|s| (collector(s), s.duration.as_secs_f64()))
                .collect(),
        )?;
        f.gauge(
            "hcclwatch_collector_last_success_timestamp_seconds",
            "Unix time of the collector's last fully successful run.",
            statuses
                .iter()
                .filter_map(|s| s.last_success.map(|t| (collector(s), unix_seconds(t))))
                .collect(),
        )
    }
}

impl Render for StatusCollector {
    fn render(&self, view: &View, f: &mut dyn Sink) -> fmt::Result {
        self.build_and_config(view, f)?;
        self.collectors(view, f)
    }
}

/// The hard-fault pushes' series.
fn push(p: &crate::snapshot::status::PushStatus, f: &mut dyn Sink) -> fmt::Result {
    f.counter(
        "hcclwatch_remediation_push_requests",
        "Hard-fault pushes to the remediation receiver, by status pushed (firing, resolved) and result (ok; retry: failed or answered 5xx, sent again; rejected: answered 4xx).",
        p.requests
            .iter()
            .map(|((status, result), n)| {
                (
                    vec![
                        ("status", status.to_string()),
                        ("result", result.to_string()),
                    ],
                    *n,
                )
            })
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_remediation_push_firing",
        "Whether this node's hard fault is pushed to the remediation receiver as firing.",
        vec![(vec![], flag(p.firing))],
    )?;
    f.gauge(
        "hcclwatch_remediation_push_last_success_timestamp_seconds",
        "Unix time of the last push the remediation receiver accepted.",
        p.last_success.map(|t| (vec![], t)).into_iter().collect(),
    )
}
