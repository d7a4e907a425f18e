//! Renders the latest snapshot as Prometheus metrics.
//!
//! One [`SnapshotCollector`] is registered with a prometheus-client registry. On every
//! scrape it takes the current `Arc`s from the [`Store`] and encodes them; it never calls
//! a device, so a scrape costs only the encoding. Metric names follow the Prometheus
//! naming guide: `hcclwatch_` prefix, base units in the name, `_total` on counters (added
//! by the encoder), static metadata in `_info` series, no timestamps, no sentinels: a
//! reading that was not obtained has no series.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::probe::histogram::Histogram;
use crate::telemetry::model::{self, ChipReadings};
use crate::telemetry::store::Store;

/// Build metadata for `hcclwatch_build_info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// Crate version.
    pub version: &'static str,
    /// Git commit.
    pub revision: &'static str,
    /// Build date (UTC, ISO 8601).
    pub build_date: &'static str,
}

impl BuildInfo {
    /// This binary's build info (set by `build.rs`).
    pub fn current() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION"),
            revision: env!("BUILD_INFO_GIT_COMMIT"),
            build_date: env!("BUILD_INFO_DATE"),
        }
    }
}

type Labels = Vec<(&'static str, String)>;

/// The collector that renders a [`Store`].
#[derive(Debug)]
pub struct SnapshotCollector {
    store: Arc<Store>,
    build: BuildInfo,
}

impl SnapshotCollector {
    /// A collector over `store`.
    pub fn new(store: Arc<Store>, build: BuildInfo) -> Self {
        Self { store, build }
    }
}

/// Builds the registry served on `/metrics`.
pub fn registry(store: Arc<Store>, build: BuildInfo) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(SnapshotCollector::new(store, build)));
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

struct Family<'a, 'b> {
    enc: &'a mut DescriptorEncoder<'b>,
}

impl Family<'_, '_> {
    fn gauge(&mut self, name: &str, help: &str, series: Vec<(Labels, f64)>) -> std::fmt::Result {
        if series.is_empty() {
            return Ok(());
        }
        let mut m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, v) in &series {
            ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
        }
        Ok(())
    }

    /// `name` without `_total`; the encoder appends it.
    fn counter(&mut self, name: &str, help: &str, series: Vec<(Labels, u64)>) -> std::fmt::Result {
        if series.is_empty() {
            return Ok(());
        }
        let mut m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Counter)?;
        for (labels, v) in &series {
            ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
        }
        Ok(())
    }
}

impl Family<'_, '_> {
    /// Encodes bucketed observations; histograms with no observation yet are left out,
    /// and with none left the family writes nothing.
    fn histogram(
        &mut self,
        name: &str,
        help: &str,
        mut series: Vec<(Labels, &Histogram)>,
    ) -> std::fmt::Result {
        series.retain(|(_, h)| h.count() > 0);
        if series.is_empty() {
            return Ok(());
        }
        let mut m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Histogram)?;
        for (labels, h) in &series {
            m.encode_family(labels)?.encode_histogram::<NoLabelSet>(
                h.sum(),
                h.count(),
                &h.buckets(),
                None,
            )?;
        }
        Ok(())
    }
}

fn device_labels(c: &ChipReadings) -> Labels {
    vec![
        ("npu", c.address.phy.to_string()),
        ("uuid", c.identity.uuid.clone().unwrap_or_default()),
        ("model", c.identity.model.clone().unwrap_or_default()),
        (
            "pci_bus_id",
            c.identity.pci_bus_id.clone().unwrap_or_default(),
        ),
    ]
}

fn with(mut l: Labels, extra: &[(&'static str, String)]) -> Labels {
    l.extend(extra.iter().cloned());
    l
}

fn per_chip<F>(chips: &[&ChipReadings], f: F) -> Vec<(Labels, f64)>
where
    F: Fn(&ChipReadings) -> Option<f64>,
{
    chips
        .iter()
        .filter_map(|c| f(c).map(|v| (device_labels(c), v)))
        .collect()
}

fn per_chip_counter<F>(
    chips: &[&ChipReadings],
    extra: &[(&'static str, &'static str)],
    f: F,
) -> Vec<(Labels, u64)>
where
    F: Fn(&ChipReadings) -> Option<u64>,
{
    chips
        .iter()
        .filter_map(|c| {
            f(c).map(|v| {
                let mut l = device_labels(c);
                l.extend(extra.iter().map(|(k, v)| (*k, (*v).to_string())));
                (l, v)
            })
        })
        .collect()
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let npu = self.store.npu();
        let host = self.store.host();
        let mut f = Family { enc: &mut enc };

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

        if let Some(r) = self.store.reload() {
            f.gauge(
                "hcclwatch_config_last_reload_successful",
                "Whether the last configuration check (start-up or SIGHUP) loaded and validated the file.",
                vec![(vec![], if r.ok { 1.0 } else { 0.0 })],
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

        if let Some(o) = self.store.otlp() {
            let mut signals = vec![("metrics", o.metrics.read())];
            if let Some(t) = &o.traces {
                signals.push(("traces", t.read()));
            }
            f.counter(
                "hcclwatch_otlp_exports",
                "OTLP export attempts by signal (each after its retries).",
                signals
                    .iter()
                    .map(|(s, r)| (vec![("signal", s.to_string())], r.0))
                    .collect(),
            )?;
            f.counter(
                "hcclwatch_otlp_export_failures",
                "OTLP exports that failed after their retries, by signal.",
                signals
                    .iter()
                    .map(|(s, r)| (vec![("signal", s.to_string())], r.1))
                    .collect(),
            )?;
            f.gauge(
                "hcclwatch_otlp_last_success_timestamp_seconds",
                "Unix time of the last successful OTLP export, by signal.",
                signals
                    .iter()
                    .filter_map(|(s, r)| r.2.map(|t| (vec![("signal", s.to_string())], t)))
                    .collect(),
            )?;
        }

        // --- Collector self-metrics ---------------------------------------------------
        let mut statuses: Vec<_> = npu.collectors.values().cloned().collect();
        if let Some(h) = &host.collector {
            statuses.push(h.clone());
        }
        f.gauge(
            "hcclwatch_scrape_collector_success",
            "Whether the collector's last run read everything it tried (1) or not (0).",
            statuses
                .iter()
                .map(|s| {
                    (
                        vec![("collector", s.name.clone())],
                        if s.success { 1.0 } else { 0.0 },
                    )
                })
                .collect(),
        )?;
        f.gauge(
            "hcclwatch_scrape_collector_duration_seconds",
            "How long the collector's last run took.",
            statuses
                .iter()
                .map(|s| {
                    (
                        vec![("collector", s.name.clone())],
                        s.duration.as_secs_f64(),
                    )
                })
                .collect(),
        )?;
        f.gauge(
            "hcclwatch_collector_last_success_timestamp_seconds",
            "Unix time of the collector's last fully successful run.",
            statuses
                .iter()
                .filter_map(|s| {
                    s.last_success
                        .map(|t| (vec![("collector", s.name.clone())], unix_seconds(t)))
                })
                .collect(),
        )?;

        // --- DCMI call health -----------------------------------------------------------
        if npu.backend == Some("dcmi") {
            f.counter(
                "hcclwatch_dcmi_call_errors",
                "DCMI calls that returned an error, by call and DCMI return code.",
                npu.stats
                    .call_errors
                    .iter()
                    .map(|((call, code), n)| {
                        (vec![("call", call.clone()), ("code", code.clone())], *n)
                    })
                    .collect(),
            )?;
            f.counter(
                "hcclwatch_dcmi_calls_timed_out",
                "DCMI calls that missed their deadline; the reading was omitted.",
                npu.stats
                    .timeouts
                    .iter()
                    .map(|(call, n)| (vec![("call", call.clone())], *n))
                    .collect(),
            )?;
            f.gauge(
                "hcclwatch_dcmi_unsupported",
                "DCMI readings this device or driver does not support (missing symbol or -8255); never called again.",
                npu.stats
                    .unsupported
                    .iter()
                    .map(|(call, reason)| (vec![("call", call.clone()), ("reason", (*reason).to_string())], 1.0))
                    .collect(),
            )?;
            f.gauge(
                "hcclwatch_dcmi_stuck_calls",
                "DCMI calls still blocked past their deadline (each holds one thread).",
                vec![(vec![], npu.stats.stuck_calls as f64)],
            )?;
        }

        // --- NPU telemetry ----------------------------------------------------------------
        let chips: Vec<&ChipReadings> = npu.state.chips.values().collect();
        f.gauge(
            "hcclwatch_devices",
            "NPUs currently enumerated by the device backend.",
            vec![(vec![], chips.len() as f64)],
        )?;
        let driver = npu.state.driver_version.clone().unwrap_or_default();
        f.gauge(
            "hcclwatch_npu_info",
            "Static NPU metadata; always 1. Join on npu.",
            chips
                .iter()
                .map(|c| {
                    (
                        with(
                            device_labels(c),
                            &[
                                ("serial", c.identity.serial.clone().unwrap_or_default()),
                                ("driver_version", driver.clone()),
                            ],
                        ),
                        1.0,
                    )
                })
                .collect(),
        )?;
        f.gauge(
            "hcclwatch_npu_up",
            "Whether the NPU answered its health query (1) or not (0: call failed or card dropped).",
            per_chip(&chips, |c| c.up.map(|u| if u { 1.0 } else { 0.0 })),
        )?;
        f.gauge(
            "hcclwatch_npu_health",
            "DCMI health: 0 ok, 1 minor alarm, 2 major alarm, 3 critical alarm.",
            per_chip(&chips, |c| c.health.map(f64::from)),
        )?;
        f.gauge(
            "hcclwatch_npu_fault_active",
            "Active NPU fault codes (DCMI event ids, hex); 0x40F84E00 means the card dropped.",
            chips
                .iter()
                .flat_map(|c| {
                    c.faults.iter().flatten().map(move |code| {
                        (
                            vec![
                                ("npu", c.address.phy.to_string()),
                                ("code", format!("0x{code:08X}")),
                                ("level", model::fault_level(*code).to_string()),
                            ],
                            1.0,
                        )
                    })
                })
                .collect(),
        )?;
        f.gauge(
            "hcclwatch_npu_network_health",
            "DCMI RoCE network health result: 0 ok, 1 socket fail, 2 receive timeout, 3 unreachable, 4 time exceeded, 5 fault, 6 initialising, 7 thread error, 8 IP not set.",
            per_chip(&chips, |c| c.network_health.map(f64::from)),
        )?;
        f.gauge(
            "hcclwatch_npu_network_up",
            "Whether the NPU's RoCE network health is good (result 0 or 6).",
            per_chip(&chips, |c| {
                c.network_health.map(|h| {
                    if model::network_health_is_ok(h) {
                        1.0
                    } else {
                        0.0
                    }
                })
            }),
        )?;
        f.gauge(
            "hcclwatch_npu_temperature_celsius",
            "NPU chip temperature.",
            per_chip(&chips, |c| c.temperature_celsius),
        )?;
        f.gauge(
            "hcclwatch_npu_power_watts",
            "NPU chip power draw.",
            per_chip(&chips, |c| c.power_watts),
        )?;
        f.gauge(
            "hcclwatch_npu_voltage_volts",
            "NPU chip voltage.",
            per_chip(&chips, |c| c.voltage_volts),
        )?;
        f.gauge(
            "hcclwatch_npu_aicore_frequency_hertz",
            "Current AI-core clock.",
            per_chip(&chips, |c| c.aicore_frequency_hertz),
        )?;
        f.gauge(
            "hcclwatch_npu_utilization_ratio",
            "NPU utilisation by unit (aicore, vector, cube, overall, hbm), 0 to 1.",
            chips
                .iter()
                .flat_map(|c| {
                    c.utilization.iter().map(move |(u, r)| {
                        (
                            with(device_labels(c), &[("unit", u.as_str().to_string())]),
                            *r,
                        )
                    })
                })
                .collect(),
        )?;
        f.gauge(
            "hcclwatch_npu_hbm_total_bytes",
            "HBM capacity.",
            per_chip(&chips, |c| c.hbm.map(|h| h.total_bytes as f64)),
        )?;
        f.gauge(
            "hcclwatch_npu_hbm_used_bytes",
            "HBM in use.",
            per_chip(&chips, |c| c.hbm.map(|h| h.used_bytes as f64)),
        )?;
        f.gauge(
            "hcclwatch_npu_hbm_temperature_celsius",
            "HBM temperature.",
            per_chip(&chips, |c| c.hbm.map(|h| h.temperature_celsius)),
        )?;
        f.gauge(
            "hcclwatch_npu_hbm_bandwidth_utilization_ratio",
            "HBM bandwidth utilisation, 0 to 1.",
            per_chip(&chips, |c| c.hbm.map(|h| h.bandwidth_utilization_ratio)),
        )?;
        f.gauge(
            "hcclwatch_npu_ddr_total_bytes",
            "DDR capacity (chips with DDR only).",
            per_chip(&chips, |c| c.ddr.map(|d| d.total_bytes as f64)),
        )?;
        f.gauge(
            "hcclwatch_npu_ddr_used_bytes",
            "DDR in use (chips with DDR only).",
            per_chip(&chips, |c| c.ddr.map(|d| d.used_bytes as f64)),
        )?;
        f.gauge(
            "hcclwatch_npu_hbm_ecc_enabled",
            "Whether HBM ECC is enabled.",
            per_chip(&chips, |c| c.ecc.map(|e| if e.enabled { 1.0 } else { 0.0 })),
        )?;
        let mut ecc = Vec::new();
        for (t, scope, get) in [
            (
                "single",
                "current",
                (|e: &model::Ecc| e.single) as fn(&model::Ecc) -> u64,
            ),
            ("double", "current", |e| e.double),
            ("single", "lifetime", |e| e.total_single),
            ("double", "lifetime", |e| e.total_double),
        ] {
            ecc.extend(per_chip_counter(
                &chips,
                &[("type", t), ("scope", scope)],
                |c| c.ecc.as_ref().map(get),
            ));
        }
        f.counter(
            "hcclwatch_npu_hbm_ecc_errors",
            "HBM ECC errors by type (single, double) and scope (current: since boot; lifetime).",
            ecc,
        )?;
        let mut pages = Vec::new();
        for (t, get) in [
            (
                "single",
                (|e: &model::Ecc| e.single_isolated_pages) as fn(&model::Ecc) -> u64,
            ),
            ("double", |e| e.double_isolated_pages),
        ] {
            pages.extend(chips.iter().filter_map(|c| {
                c.ecc.as_ref().map(|e| {
                    (
                        with(device_labels(c), &[("type", t.to_string())]),
                        get(e) as f64,
                    )
                })
            }));
        }
        f.gauge(
            "hcclwatch_npu_hbm_ecc_isolated_pages",
            "HBM pages isolated after ECC errors, by error type.",
            pages,
        )?;

        type Pc = model::PacketCounters;
        type Getters = Vec<(&'static str, fn(&Pc) -> u64)>;
        let packet_families: [(&str, &str, Getters); 7] = [
            (
                "hcclwatch_npu_mac_pause_frames",
                "MAC pause frames on the NPU's network port, by direction.",
                vec![("tx", |p| p.mac_tx_pause), ("rx", |p| p.mac_rx_pause)],
            ),
            (
                "hcclwatch_npu_mac_pfc_frames",
                "MAC PFC frames (all priorities), by direction; a PFC storm shows here.",
                vec![("tx", |p| p.mac_tx_pfc), ("rx", |p| p.mac_rx_pfc)],
            ),
            (
                "hcclwatch_npu_mac_bad_packets",
                "Bad MAC packets, by direction.",
                vec![("tx", |p| p.mac_tx_bad), ("rx", |p| p.mac_rx_bad)],
            ),
            (
                "hcclwatch_npu_roce_packets",
                "RoCE packets, by direction.",
                vec![("tx", |p| p.roce_tx_all), ("rx", |p| p.roce_rx_all)],
            ),
            (
                "hcclwatch_npu_roce_error_packets",
                "RoCE error packets, by direction.",
                vec![("tx", |p| p.roce_tx_err), ("rx", |p| p.roce_rx_err)],
            ),
            (
                "hcclwatch_npu_roce_cnp_packets",
                "RoCE congestion notification packets, by direction.",
                vec![("tx", |p| p.roce_tx_cnp), ("rx", |p| p.roce_rx_cnp)],
            ),
            (
                "hcclwatch_npu_roce_retransmissions",
                "RoCE new-packet retransmissions.",
                vec![("", |p| p.roce_retry)],
            ),
        ];
        for (name, help, dirs) in packet_families {
            let mut series = Vec::new();
            for (dir, get) in dirs {
                let extra: &[(&'static str, &'static str)] = if dir.is_empty() {
                    &[]
                } else {
                    &[("direction", dir)]
                };
                let extra: Vec<(&'static str, &'static str)> = extra.to_vec();
                series.extend(per_chip_counter(&chips, &extra, |c| {
                    c.packets.as_ref().map(get)
                }));
            }
            f.counter(name, help, series)?;
        }
        f.counter(
            "hcclwatch_npu_mac_fcs_errors",
            "Frames received with FCS errors.",
            per_chip_counter(&chips, &[], |c| c.packets.map(|p| p.mac_rx_fcs_errors)),
        )?;
        f.counter(
            "hcclwatch_npu_roce_ecn_marks",
            "RoCE ECN doorbells (congestion marks).",
            per_chip_counter(&chips, &[], |c| c.packets.map(|p| p.roce_ecn)),
        )?;

        let links = |get: fn(&model::Hccs) -> Option<[f64; 16]>, dir: &'static str| {
            chips
                .iter()
                .flat_map(move |c| {
                    get(&c.hccs).into_iter().flat_map(move |arr| {
                        arr.into_iter().enumerate().map(move |(i, v)| {
                            (
                                with(
                                    device_labels(c),
                                    &[("link", i.to_string()), ("direction", dir.to_string())],
                                ),
                                v,
                            )
                        })
                    })
                })
                .collect::<Vec<_>>()
        };
        let mut bw = links(|h| h.tx_bytes_per_second, "tx");
        bw.extend(links(|h| h.rx_bytes_per_second, "rx"));
        f.gauge(
            "hcclwatch_npu_hccs_bandwidth_bytes_per_second",
            "HCCS link bandwidth over the DCMI sampling window, by link and direction.",
            bw,
        )?;
        let counts = |get: fn(&model::Hccs) -> Option<[u64; 16]>, extra: Option<&'static str>| {
            chips
                .iter()
                .flat_map(move |c| {
                    get(&c.hccs).into_iter().flat_map(move |arr| {
                        arr.into_iter().enumerate().map(move |(i, v)| {
                            let mut l = with(device_labels(c), &[("link", i.to_string())]);
                            if let Some(d) = extra {
                                l.push(("direction", d.to_string()));
                            }
                            (l, v)
                        })
                    })
                })
                .collect::<Vec<_>>()
        };
        let mut flits = counts(|h| h.tx_flits, Some("tx"));
        flits.extend(counts(|h| h.rx_flits, Some("rx")));
        f.counter(
            "hcclwatch_npu_hccs_flits",
            "HCCS flits by link and direction.",
            flits,
        )?;
        f.counter(
            "hcclwatch_npu_hccs_crc_errors",
            "HCCS CRC errors by link.",
            counts(|h| h.crc_errors, None),
        )?;

        // --- Probing and verdicts -----------------------------------------------------------
        if let Some(pr) = self.store.probe() {
            let node = |i: usize| pr.nodes.get(i).cloned().unwrap_or_else(|| i.to_string());
            f.gauge(
                "hcclwatch_probe_active",
                "Whether probing runs with a formed group (0: paused, fail-closed; telemetry continues).",
                vec![(vec![], if pr.active { 1.0 } else { 0.0 })],
            )?;
            f.counter(
                "hcclwatch_probe_rounds",
                "Probe rounds by result.",
                vec![
                    (vec![("result", "ok".to_string())], pr.rounds_ok),
                    (vec![("result", "failed".to_string())], pr.rounds_failed),
                ],
            )?;
            f.counter(
                "hcclwatch_probe_bytes",
                "Probe payload bytes this node sent.",
                vec![(vec![], pr.bytes_sent)],
            )?;
            f.gauge(
                "hcclwatch_probe_budget_ratio",
                "Probe bytes sent in the last hour divided by probe.budget_bytes_per_hour.",
                pr.budget_ratio.map(|r| (vec![], r)).into_iter().collect(),
            )?;
            f.gauge(
                "hcclwatch_probe_busy_ratio",
                "Seconds this node spent in probe rounds in the last hour divided by 3600 x probe.budget_busy_ratio.",
                pr.busy_ratio.map(|r| (vec![], r)).into_iter().collect(),
            )?;
            f.gauge(
                "hcclwatch_probe_budget_limited",
                "Whether the group runs reduced rounds because a member is over its probe budget.",
                vec![(vec![], if pr.budget_limited { 1.0 } else { 0.0 })],
            )?;
            f.gauge(
                "hcclwatch_probe_coverage_ratio",
                "Distinct peers this node exchanged with over the last n-1 rounds, divided by n-1.",
                vec![(vec![], pr.coverage)],
            )?;
            f.gauge(
                "hcclwatch_probe_group_members",
                "Members of the formed probe group (0 while it is not formed).",
                vec![(vec![], pr.members as f64)],
            )?;
            f.gauge(
                "hcclwatch_membership_stale",
                "Whether the member list could not be refreshed for probe.membership_stale_after (probing stops, fail-closed).",
                vec![(vec![], if pr.membership_stale { 1.0 } else { 0.0 })],
            )?;
            f.gauge(
                "hcclwatch_peer_up",
                "Whether the member is in the formed probe group (0: not answering, left out after probe.member_timeout, or probing paused).",
                pr.peer_up
                    .iter()
                    .enumerate()
                    .map(|(i, u)| (vec![("peer", node(i))], if *u { 1.0 } else { 0.0 }))
                    .collect(),
            )?;
            if pr.active || pr.rounds_ok > 0 {
                f.gauge(
                    "hcclwatch_node_state",
                    "1 for the node's current health state.",
                    pr.states
                        .iter()
                        .enumerate()
                        .flat_map(|(i, st)| {
                            crate::health::NodeState::ALL.iter().map(move |s| {
                                (
                                    vec![("node", node(i)), ("state", s.as_str().to_string())],
                                    if s == st { 1.0 } else { 0.0 },
                                )
                            })
                        })
                        .collect(),
                )?;
                f.gauge(
                    "hcclwatch_straggler_score",
                    "Window median of the node's log time residual against its peers (0.08 ≈ 8% slower).",
                    pr.scores.iter().enumerate().filter(|(_, v)| v.is_finite()).map(|(i, v)| (vec![("node", node(i))], *v)).collect(),
                )?;
                f.gauge(
                    "hcclwatch_rank_arrival_lag_seconds",
                    "How much later than the last arrival's peers the node reached the round's barrier (the straggler waits least).",
                    pr.arrival_lag.iter().enumerate().filter(|(_, v)| v.is_finite()).map(|(i, v)| (vec![("node", node(i))], *v)).collect(),
                )?;
                f.gauge(
                    "hcclwatch_link_bandwidth_bytes_per_second",
                    "Exchange bandwidth of the pairs in the current permutation round.",
                    pr.links
                        .iter()
                        .map(|(a, b, v)| (vec![("src_node", node(*a)), ("dst_node", node(*b))], *v))
                        .collect(),
                )?;
                f.gauge(
                    "hcclwatch_fabric_degraded",
                    "Whether the whole probe group is slow against its baseline (blocks quarantine recommendations).",
                    vec![(vec![], if pr.fabric_degraded { 1.0 } else { 0.0 })],
                )?;
                f.gauge(
                    "hcclwatch_link_degraded",
                    "Pairs the health engine judged a degraded link (both ends otherwise normal); a link verdict never quarantines a node.",
                    pr.link_degraded
                        .iter()
                        .map(|(a, b)| (vec![("src_node", node(*a)), ("dst_node", node(*b))], 1.0))
                        .collect(),
                )?;
                f.gauge(
                    "hcclwatch_quarantine_recommended",
                    "Nodes the health engine recommends taking out of scheduling; reason is straggler or hard_fault (details in /api/v1/state).",
                    pr.quarantine
                        .iter()
                        .map(|(i, why)| (vec![("node", node(*i)), ("reason", why.clone())], 1.0))
                        .collect(),
                )?;
                if let Some(l) = pr.latency {
                    f.gauge(
                        "hcclwatch_probe_latency_seconds",
                        "Duration of the round's small all-reduce (slowest rank).",
                        vec![(vec![], l)],
                    )?;
                }
                f.histogram(
                    "hcclwatch_link_rtt_seconds",
                    "Latency-sized ping-pong round trips from this node to its permutation peer of the round.",
                    vec![(vec![], &pr.link_rtt)],
                )?;
                f.histogram(
                    "hcclwatch_collective_duration_seconds",
                    "Duration of this node's probe collectives.",
                    pr.collective_durations
                        .iter()
                        .map(|(op, bytes, h)| {
                            (
                                vec![("op", op.clone()), ("size_bytes", bytes.to_string())],
                                h,
                            )
                        })
                        .collect(),
                )?;
                if let Some((algo, bytes, busbw)) = &pr.busbw {
                    f.gauge(
                        "hcclwatch_collective_busbw_bytes_per_second",
                        "Bus bandwidth of the last probe ring all-reduce.",
                        vec![(
                            vec![
                                ("op", "all_reduce".to_string()),
                                ("algo", algo.clone()),
                                ("size_bytes", bytes.to_string()),
                            ],
                            *busbw,
                        )],
                    )?;
                    f.gauge(
                        "hcclwatch_collective_busbw_expected_bytes_per_second",
                        "Bus bandwidth the alpha-beta model predicts for the same all-reduce, from the latency and per-byte costs measured when the probe group formed.",
                        pr.busbw_expected
                            .map(|e| {
                                (
                                    vec![
                                        ("op", "all_reduce".to_string()),
                                        ("algo", algo.clone()),
                                        ("size_bytes", bytes.to_string()),
                                    ],
                                    e,
                                )
                            })
                            .into_iter()
                            .collect(),
                    )?;
                }
            }
        }

        // --- Host ----------------------------------------------------------------------------
        if let Some(h) = &host.readings {
            f.gauge(
                "hcclwatch_host_cpu_usage_ratio",
                "Host CPU busy ratio over all cores since the previous host collection.",
                h.cpu_usage_ratio.map(|r| (vec![], r)).into_iter().collect(),
            )?;
            f.gauge(
                "hcclwatch_host_cpus",
                "Logical CPUs on the host.",
                vec![(vec![], h.cpus as f64)],
            )?;
            f.gauge(
                "hcclwatch_host_memory_total_bytes",
                "Host memory.",
                vec![(vec![], h.memory_total_bytes as f64)],
            )?;
            f.gauge(
                "hcclwatch_host_memory_available_bytes",
                "Host memory available to new work.",
                vec![(vec![], h.memory_available_bytes as f64)],
            )?;
            let ifaces = |get: fn(&crate::telemetry::host::InterfaceCounters) -> u64| {
                h.interfaces
                    .iter()
                    .map(|(name, c)| (vec![("interface", name.clone())], get(c)))
                    .collect::<Vec<_>>()
            };
            f.counter(
                "hcclwatch_host_network_receive_bytes",
                "Bytes received per interface.",
                ifaces(|c| c.rx_bytes),
            )?;
            f.counter(
                "hcclwatch_host_network_transmit_bytes",
                "Bytes sent per interface.",
                ifaces(|c| c.tx_bytes),
            )?;
            f.counter(
                "hcclwatch_host_network_receive_errors",
                "Receive errors per interface.",
                ifaces(|c| c.rx_errors),
            )?;
            f.counter(
                "hcclwatch_host_network_transmit_errors",
                "Transmit errors per interface.",
                ifaces(|c| c.tx_errors),
            )?;
        }
        Ok(())
    }
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
    use crate::telemetry::model::Hccs;
    use crate::telemetry::sim::SimSource;
    use crate::telemetry::store::{CollectorStatus, HostPart, NpuPart};
    use crate::telemetry::{DeviceSource, Group, NpuState, SourceStats};
    use std::time::Duration;

    fn full_store() -> Arc<Store> {
        let mut sim = SimSource::new(2, 3);
        let mut state = NpuState::default();
        for g in Group::ALL {
            sim.collect(g, &mut state);
        }
        for c in state.chips.values_mut() {
            c.faults = Some(vec![model::FAULT_CARD_DROPPED]);
            c.ddr = Some(model::Ddr {
                total_bytes: 2,
                used_bytes: 1,
            });
            c.hccs = Hccs {
                tx_bytes_per_second: Some([1.0; 16]),
                rx_bytes_per_second: Some([1.0; 16]),
                tx_flits: Some([1; 16]),
                rx_flits: Some([1; 16]),
                crc_errors: Some([0; 16]),
            };
        }
        let mut stats = SourceStats::default();
        stats
            .call_errors
            .insert(("dcmi_get_device_health".into(), "-8012".into()), 1);
        stats
            .timeouts
            .insert("dcmi_get_device_network_health".into(), 1);
        stats
            .unsupported
            .insert(("dcmi_get_device_memory_info_v3".into(), "not_supported"));
        let status = CollectorStatus {
            name: "dcmi".into(),
            success: true,
            duration: Duration::from_millis(1),
            last_success: Some(SystemTime::now()),
        };
        let store = Arc::new(Store::new(true, true));
        store.publish_npu(NpuPart {
            backend: Some("dcmi"),
            backend_up: true,
            state,
            collectors: [("dcmi".to_string(), status.clone())].into_iter().collect(),
            stats,
        });
        let mut host = crate::telemetry::host::HostSource::new();
        let _ = host.collect();
        store.publish_host(HostPart {
            readings: host.collect(),
            collector: Some(CollectorStatus {
                name: "host".into(),
                ..status
            }),
        });
        store
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
