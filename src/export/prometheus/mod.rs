//! The Prometheus exposition: one small collector per domain of the snapshot.
//!
//! Each collector ([`status`], [`npu`], [`probe`], [`device`], [`host`], [`port`],
//! [`attribution`]) renders its part of a [`View`] of the [`Store`] and writes families
//! through the [`family::Sink`] vocabulary; it never calls a device, so a scrape costs
//! only the encoding. A scrape takes one view and hands it to every collector, in that
//! order, so the exposition is one moment of the store: a per-NPU series and the pod
//! labels it carries come from the same attribution as the allocation family. Metric
//! names follow the Prometheus naming guide: `hcclwatch_` prefix, base units in the name,
//! `_total` on counters (added by the encoder), static metadata in `_info` series, no
//! timestamps, no sentinels: a reading that was not obtained has no series. The same
//! collectors feed the OTLP bridge ([`crate::export::otlp`]).
//!
//! Two opt-in [`Options`] change `/metrics` only: [`npu_exporter`] adds the readings
//! under npu-exporter's names (`compat.npu_exporter`), and [`node_label`] puts a `node`
//! label on every series (`web.node_label`). OTLP has neither: its consumers read the
//! hcclwatch names, and the node is the `k8s.node.name` resource attribute there.

pub(crate) mod attribution;
pub(crate) mod cache;
pub(crate) mod device;
pub(crate) mod family;
pub(crate) mod host;
pub(crate) mod node_label;
pub(crate) mod npu;
pub(crate) mod npu_exporter;
pub(crate) mod overrides;
pub(crate) mod port;
pub(crate) mod probe;
pub(crate) mod status;
pub(crate) mod topology;

use std::fmt::Write as _;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use self::family::{Encoder, Render, Sink};
use self::node_label::NodeLabelSink;
use crate::config::Config;
use crate::snapshot::status::BuildInfo;
use crate::snapshot::{Store, View};

/// What `/metrics` adds to the families every exporter shares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// `compat.npu_exporter`: also the readings under npu-exporter's names.
    pub npu_exporter: bool,
    /// `web.node_label`: `node="<this>"` on every series.
    pub node_label: Option<String>,
}

impl Options {
    /// The options `config` asks for.
    pub fn from_config(config: &Config) -> Self {
        Self {
            npu_exporter: config.compat.npu_exporter,
            node_label: config.web.node_label.clone(),
        }
    }
}

/// Every domain collector, in exposition order.
pub fn collectors(build: &BuildInfo) -> Vec<Box<dyn Render>> {
    vec![
        Box::new(status::StatusCollector::new(build.clone())),
        Box::new(npu::NpuCollector),
        Box::new(probe::ProbeCollector),
        Box::new(device::DeviceCollector),
        Box::new(host::HostCollector),
        Box::new(port::PortCollector),
        Box::new(attribution::AttributionCollector),
        Box::new(topology::TopologyCollector),
        Box::new(overrides::OverridesCollector),
    ]
}

/// Renders every collector, in order, from one view.
fn render_all(collectors: &[Box<dyn Render>], view: &View, out: &mut dyn Sink) -> std::fmt::Result {
    for c in collectors {
        c.render(view, out)?;
    }
    Ok(())
}

/// The whole exposition as one prometheus-client collector: each encoding takes one view
/// of the store and renders every domain from it.
#[derive(Debug)]
struct Scrape {
    store: Arc<Store>,
    collectors: Vec<Box<dyn Render>>,
    node_label: Option<String>,
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let view = self.store.view();
        let mut out = Encoder::new(&mut enc);
        match &self.node_label {
            Some(node) => render_all(
                &self.collectors,
                &view,
                &mut NodeLabelSink::new(&mut out, node),
            ),
            None => render_all(&self.collectors, &view, &mut out),
        }
    }
}

/// Builds the registry served on `/metrics` with no [`Options`]: one collector over
/// `store`, so that every encoding of it reads the store once.
pub fn registry(store: Arc<Store>, build: BuildInfo) -> Registry {
    registry_with(store, build, &Options::default())
}

/// Builds the registry served on `/metrics`, with what `options` adds.
pub fn registry_with(store: Arc<Store>, build: BuildInfo, options: &Options) -> Registry {
    let mut domains = collectors(&build);
    if options.npu_exporter {
        domains.push(Box::new(npu_exporter::NpuExporterCollector));
    }
    registry_of(store, domains, options.node_label.clone())
}

/// A registry encoding `collectors` from one view of `store` per encoding.
fn registry_of(
    store: Arc<Store>,
    collectors: Vec<Box<dyn Render>>,
    node_label: Option<String>,
) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(Scrape {
        store,
        collectors,
        node_label,
    }));
    r
}

/// Exposition formats `/metrics` can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.
    OpenMetrics,
    /// Prometheus text 0.0.4 (what promtool checks).
    Text004,
}

impl Format {
    /// Picks the format from an `Accept` header: OpenMetrics only when asked for.
    pub fn negotiate(accept: Option<&str>) -> Self {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text004,
        }
    }

    /// The `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text004 => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }
}

/// Encodes the registry in `format`.
pub fn encode(registry: &Registry, format: Format) -> Result<String, std::fmt::Error> {
    let mut out = String::with_capacity(64 * 1024);
    match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, registry)?,
        Format::Text004 => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, registry)?
        }
    }
    Ok(out)
}

/// Writes a tiny HTML index with links to the endpoints.
pub fn index_page(telemetry_path: &str, build: &BuildInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<!doctype html><html><head><title>hcclwatch</title></head><body>\
         <h1>hcclwatch</h1><p>NPU fleet health monitor, version {} ({}).</p><ul>\
         <li><a href=\"{p}\">{p}</a>: metrics</li>\
         <li><a href=\"/-/healthy\">/-/healthy</a>: liveness</li>\
         <li><a href=\"/-/ready\">/-/ready</a>: readiness (first collection done)</li>\
         </ul></body></html>",
        build.version,
        build.revision,
        p = telemetry_path
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_store() -> Arc<Store> {
        crate::snapshot::fixture::store(2)
    }

    /// Every family follows the Prometheus naming guide: one prefix, snake_case, `_total`
    /// exactly on counters, a base unit where the name carries one.
    #[test]
    fn metric_names_follow_conventions() {
        let reg = registry(full_store(), BuildInfo::current());
        let text = encode(&reg, Format::Text004).unwrap();
        let mut families = 0;
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let mut parts = line.split_whitespace().skip(2);
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
            families += 1;
            assert!(name.starts_with("hcclwatch_"), "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{name} is not snake_case"
            );
            match kind {
                "counter" => assert!(name.ends_with("_total"), "counter {name} lacks _total"),
                "gauge" => assert!(
                    !name.ends_with("_total") && !name.ends_with("_count"),
                    "gauge {name} ends like a counter"
                ),
                "histogram" => assert!(
                    name.ends_with("_seconds"),
                    "histogram {name} is not a duration in seconds"
                ),
                other => panic!("unexpected type {other} for {name}"),
            }
            for bad in [
                "_celsius_",
                "_percent",
                "_mb",
                "_kb",
                "_milliseconds",
                "_mhz",
            ] {
                assert!(!name.contains(bad), "{name} uses a non-base unit");
            }
        }
        assert!(families >= 40, "only {families} families rendered");
        // No sample carries a timestamp: every sample line is `series value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let after_labels = line.rsplit_once('}').map_or(line, |(_, rest)| rest);
            assert_eq!(
                after_labels.split_whitespace().count(),
                if line.contains('}') { 1 } else { 2 },
                "{line}"
            );
        }
    }

    /// Publishes a pod on NPU 0 (with `web.pod_labels`) when it renders: an attribution
    /// pass finishing in the middle of a scrape.
    #[derive(Debug)]
    struct PublishesMidScrape(Arc<Store>);

    impl Render for PublishesMidScrape {
        fn render(&self, _: &View, _: &mut dyn Sink) -> std::fmt::Result {
            use crate::snapshot::attribution::*;
            let mut a = AttributionSnapshot {
                pod_labels: true,
                ..Default::default()
            };
            a.sources.insert(
                Source::PodResources,
                SourceStatus {
                    ok: true,
                    error: None,
                },
            );
            let pod = PodRef {
                name: Some(PodName {
                    namespace: "ml".into(),
                    name: "train-0".into(),
                }),
                uid: None,
            };
            a.users.insert(
                0,
                vec![NpuUser {
                    pod,
                    container: Some("main".into()),
                    evidence: [Evidence::PodResources].into(),
                    pids: Default::default(),
                }],
            );
            self.0.publish_attribution(a);
            Ok(())
        }
    }

    /// One scrape is one moment of the store: attribution published between the NPU and
    /// the attribution collectors (as in the flaky daemon test this pins) shows in neither
    /// family of that scrape, and in both of the next. Each collector reading the store on
    /// its own gave the first scrape the allocation without the pod labels.
    #[test]
    fn a_publish_during_a_scrape_shows_in_the_next_scrape_whole() {
        let store = full_store();
        let domains: Vec<Box<dyn Render>> = vec![
            Box::new(npu::NpuCollector),
            Box::new(PublishesMidScrape(store.clone())),
            Box::new(attribution::AttributionCollector),
        ];
        let reg = registry_of(store.clone(), domains, None);
        let scrape = |reg: &Registry| encode(reg, Format::Text004).unwrap();
        let labelled = |text: &str| {
            text.lines().any(|l| {
                l.starts_with("hcclwatch_npu_temperature_celsius{")
                    && l.contains("npu=\"0\"")
                    && l.contains("pod=\"train-0\"")
            })
        };
        let allocated = |text: &str| {
            text.lines().any(|l| {
                l.starts_with("hcclwatch_npu_allocation_info{")
                    && l.contains("npu=\"0\"")
                    && l.contains("pod=\"train-0\"")
            })
        };
        let first = scrape(&reg);
        assert!(
            !labelled(&first) && !allocated(&first),
            "the first scrape mixed two attribution parts:\n{first}"
        );
        let second = scrape(&reg);
        assert!(labelled(&second) && allocated(&second), "{second}");
    }

    #[test]
    fn format_negotiation() {
        assert_eq!(Format::negotiate(None), Format::Text004);
        assert_eq!(
            Format::negotiate(Some("text/plain;version=0.0.4")),
            Format::Text004
        );
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0;q=0.9,*/*;q=0.1"
            )),
            Format::OpenMetrics
        );
    }

    #[test]
    fn empty_store_renders_build_info_and_zero_devices() {
        let reg = registry(Arc::new(Store::new(false, false)), BuildInfo::current());
        let text = encode(&reg, Format::Text004).unwrap();
        assert!(text.contains("hcclwatch_build_info{"));
        assert!(text.contains("hcclwatch_devices 0"));
        assert!(
            !text.contains("hcclwatch_npu_"),
            "no NPU series without NPUs:\n{text}"
        );
    }
}
