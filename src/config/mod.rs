//! Configuration: a TOML file, overridden by `HCCLWATCH_<SECTION>_<KEY>` environment
//! variables, overridden by command-line flags.
//!
//! Loading never stops at the first mistake. The document is walked against
//! [`schema::SCHEMA`] so that every unknown key (with the nearest valid key), every type
//! error and every out-of-range value is reported at once, each as
//! `PATH:LINE: key.path: reason`. That is what an SRE editing a ConfigMap needs: one run
//! of `hcclwatch check-config` shows all of it.

pub mod diff;
pub mod duration;
pub mod file;
pub mod overrides;
pub mod schema;
pub mod web;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The whole daemon configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// HTTP endpoint settings.
    pub web: WebConfig,
    /// Logging settings.
    pub log: LogConfig,
    /// Device telemetry settings.
    pub telemetry: TelemetryConfig,
    /// The collective engine: peers and transport (used by `bench --config.file` and
    /// by probing).
    pub collective: CollectiveConfig,
    /// Continuous probing between the `[collective]` peers.
    pub probe: ProbeSection,
    /// Straggler-detection thresholds.
    pub health: HealthSection,
    /// Device-plane probing: NPU port to NPU port pings.
    pub device_probe: DeviceProbeSection,
    /// Which collectors run.
    pub collectors: CollectorsConfig,
    /// OpenTelemetry (OTLP) export; off unless an endpoint is configured.
    pub otlp: OtlpConfig,
    /// Which pods and containers use each NPU.
    pub attribution: AttributionConfig,
}

/// `[attribution]`: which pods and containers use each NPU, from the kubelet's
/// pod-resources API, the Kubernetes API (Volcano's `huawei.com/AscendReal` annotation,
/// pod names for UIDs) and `/proc/<pid>/cgroup` of the NPU processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AttributionConfig {
    /// Master switch; when on, each source is used where it is available.
    pub enabled: bool,
    /// The kubelet pod-resources socket; used while it exists.
    pub pod_resources_socket: PathBuf,
    /// Extended-resource names (prefixes) that are Ascend NPUs, e.g.
    /// `huawei.com/Ascend910` also matches the vNPU resource `huawei.com/Ascend910-2c`.
    pub resource_prefixes: Vec<String>,
    /// Time between attribution passes.
    #[serde(with = "duration::serde_str")]
    pub interval: Duration,
    /// Bound on each call of a pass (pod-resources `List`, the Kubernetes pod list).
    #[serde(with = "duration::serde_str")]
    pub deadline: Duration,
    /// Read pods on this node through the Kubernetes API (in-cluster service account or
    /// `KUBECONFIG`), where one can be reached.
    pub kubernetes_api: bool,
    /// A kubeconfig file for that API; when unset, the in-cluster service account or
    /// `KUBECONFIG`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// This node's Kubernetes name, for the pod list's `spec.nodeName` field selector.
    /// Empty: the `NODE_NAME` environment variable, else the host name.
    pub node_name: String,
    /// Where the host's `/proc` is (the NPU processes' cgroups are read there).
    pub proc_root: PathBuf,
}

impl Default for AttributionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            pod_resources_socket: "/var/lib/kubelet/pod-resources/kubelet.sock".into(),
            resource_prefixes: [
                "huawei.com/Ascend910",
                "huawei.com/Ascend310P",
                "huawei.com/Ascend310",
                "huawei.com/npu",
            ]
            .map(String::from)
            .to_vec(),
            interval: Duration::from_secs(15),
            deadline: Duration::from_secs(2),
            kubernetes_api: true,
            kubeconfig: None,
            node_name: String::new(),
            proc_root: "/proc".into(),
        }
    }
}

/// `[otlp]`: push every metric (and optionally probe-round traces) over OTLP/HTTP.
///
/// The standard `OTEL_EXPORTER_OTLP_*` variables apply where a key here is left at its
/// default; a key set here wins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpConfig {
    /// Base URL of the OTLP/HTTP receiver (`/v1/metrics`, `/v1/traces` are appended);
    /// empty: `OTEL_EXPORTER_OTLP_ENDPOINT`, and without either, no export.
    pub endpoint: String,
    /// Wire protocol; only `http/protobuf` is built.
    pub protocol: String,
    /// Time between metric exports.
    #[serde(with = "duration::serde_str")]
    pub interval: Duration,
    /// Extra request headers as `name=value`.
    pub headers: Vec<String>,
    /// Bound on one export request.
    #[serde(with = "duration::serde_str")]
    pub timeout: Duration,
    /// `none` (or what `OTEL_EXPORTER_OTLP_COMPRESSION` says) or `gzip`.
    pub compression: String,
    /// Export a span per probe round, with a child span per collective.
    pub traces: bool,
    /// How long the final flush may take at shutdown.
    #[serde(with = "duration::serde_str")]
    pub shutdown_timeout: Duration,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        Self {
            endpoint: String::new(),
            protocol: "http/protobuf".into(),
            interval: Duration::from_secs(60),
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
            compression: "none".into(),
            traces: false,
            shutdown_timeout: Duration::from_secs(5),
        }
    }
}

/// Parses a `probe.inject_peer_throttle` element, `"IP:PORT=BYTES_PER_SECOND"`.
pub fn parse_peer_throttle(e: &str) -> Result<(std::net::SocketAddr, u64), String> {
    let (addr, rate) = e
        .split_once('=')
        .ok_or("expected IP:PORT=BYTES_PER_SECOND")?;
    let addr = addr
        .trim()
        .parse()
        .map_err(|_| format!("{:?} is not IP:PORT", addr.trim()))?;
    let rate: u64 = rate.trim().parse().ok().filter(|r| *r > 0).ok_or_else(|| {
        format!(
            "{:?} is not a positive number of bytes per second",
            rate.trim()
        )
    })?;
    Ok((addr, rate))
}

/// `[probe]`: continuous probing rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeSection {
    /// Run probe rounds with the `[collective]` peers.
    pub enabled: bool,
    /// Time between round starts.
    #[serde(with = "duration::serde_str")]
    pub interval: Duration,
    /// Bytes of the latency all-reduce.
    pub small_bytes: u64,
    /// Bytes of each permutation / confirmation exchange.
    pub link_bytes: u64,
    /// A ring all-reduce every this many rounds (0: never).
    pub ring_every: u64,
    /// Bytes of the ring all-reduce.
    pub ring_bytes: u64,
    /// Probe bytes this node may send per hour (0: unlimited).
    pub budget_bytes_per_hour: u64,
    /// Fraction of wall time this node may spend in probe rounds over the last hour (0:
    /// unlimited); over it, the group runs reduced rounds as for the byte budget.
    pub budget_busy_ratio: f64,
    /// Members per probe group at most; a bigger fleet (or topology label) is split into
    /// balanced groups, since a pair recurs in the permutation only once per n − 1 rounds.
    pub max_group_size: u64,
    /// Fault injection for tests and the demo: cap this node's probe sends (0: off).
    pub inject_throttle_bytes_per_second: u64,
    /// Fault injection for tests only: this member lies in everything it reports to its
    /// group (plans, timings, engine state), to show that one member cannot cause a
    /// quarantine.
    pub inject_lies: bool,
    /// Fault injection for tests and the demo: cap this node's probe sends to one peer,
    /// as `"IP:PORT=BYTES_PER_SECOND"` (that peer's probe address); overrides
    /// `inject_throttle_bytes_per_second` for it. Set on both ends, it is a slow link.
    pub inject_peer_throttle: Vec<String>,
    /// A member that has not accepted a connection for this long is left out of the group
    /// (the others go on probing) until it accepts again.
    #[serde(with = "duration::serde_str")]
    pub member_timeout: Duration,
    /// How often `collective.peers_dns` is resolved again.
    #[serde(with = "duration::serde_str")]
    pub dns_refresh: Duration,
    /// A DNS member list not refreshed for this long is stale: probing stops (fail closed).
    #[serde(with = "duration::serde_str")]
    pub membership_stale_after: Duration,
    /// Read this node's own uplink congestion each round and report it to the group.
    pub congestion_enabled: bool,
    /// The interface whose byte counters are read; empty: the one that holds the local
    /// address the probes use.
    pub congestion_interface: String,
    /// Other traffic at or above this fraction of the line rate, in either direction,
    /// makes the round congested.
    pub congestion_busy_ratio: f64,
    /// The uplink's line rate in bits per second; 0 reads it from sysfs (`speed`).
    pub congestion_line_rate: u64,
    /// Congestion-marked packets (`IpExt: InCEPkts`) since the last round at or above
    /// this make the round congested (0: this signal off).
    pub congestion_ce_packets: u64,
    /// For tests: where sysfs is (`class/net/<if>/...` is read below it).
    pub congestion_sysfs_root: PathBuf,
    /// For tests: where procfs is (`net/netstat` is read below it).
    pub congestion_procfs_root: PathBuf,
}

impl Default for ProbeSection {
    fn default() -> Self {
        Self {
            enabled: false,
            interval: Duration::from_secs(10),
            small_bytes: 8192,
            link_bytes: 1 << 20,
            ring_every: 10,
            ring_bytes: 4 << 20,
            budget_bytes_per_hour: 1 << 30,
            budget_busy_ratio: 0.01,
            max_group_size: 64,
            inject_throttle_bytes_per_second: 0,
            inject_lies: false,
            inject_peer_throttle: Vec::new(),
            member_timeout: Duration::from_secs(90),
            dns_refresh: Duration::from_secs(30),
            membership_stale_after: Duration::from_secs(300),
            congestion_enabled: true,
            congestion_interface: String::new(),
            congestion_busy_ratio: 0.5,
            congestion_line_rate: 0,
            congestion_ce_packets: 100,
            congestion_sysfs_root: "/sys".into(),
            congestion_procfs_root: "/proc".into(),
        }
    }
}

/// `[health]`: the health engine's thresholds (defaults chosen with `hcclwatch simulate`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthSection {
    /// Rounds in the scoring window.
    pub window: u32,
    /// Effect size to enter suspect (0.08 = 8 % slower than the round median).
    pub delta: f64,
    /// Robust-z threshold.
    pub z: f64,
    /// Floor on the robust spread, in log units.
    pub mad_floor: f64,
    /// Known-good peers a suspect is re-paired with.
    pub confirm_peers: u32,
    /// Rounds a hard fault must stay absent before its quarantine recommendation moves to
    /// probation.
    pub hard_hold_down: u32,
    /// Consecutive reads of critical health or of RoCE network health not OK that make a
    /// hard fault.
    pub hard_consecutive_reads: u32,
    /// Uncorrectable (double-bit) HBM ECC errors within the last hour that make a hard
    /// fault; it clears an hour after the last one.
    pub hard_ecc_double_per_hour: u32,
    /// Consecutive rounds of re-pairings that must reproduce before a suspect is confirmed.
    pub confirm_rounds: u32,
    /// Steadily slow rounds after confirmation without congestion reported by the node's
    /// own uplink before the second re-pairing.
    pub confirm_hold: u32,
    /// Steadily slow rounds before the second re-pairing when the node's uplink reported
    /// congestion in some of them.
    pub congested_hold: u32,
    /// Rounds within bounds to leave suspect/confirmed or a quarantine recommendation.
    pub exit_rounds: u32,
    /// Rounds of probation after a quarantine.
    pub probation_rounds: u32,
    /// Round median above baseline × this is a fabric-slow round.
    pub fabric_ratio: f64,
    /// Fabric-slow rounds in the window that make a fabric verdict.
    pub fabric_rounds: u32,
    /// Slow re-measurements of one pair that make a link verdict.
    pub link_observations: u32,
}

impl Default for HealthSection {
    /// The shipped thresholds. They are the health engine's defaults too
    /// (`probe::settings` tests that the two agree).
    fn default() -> Self {
        Self {
            window: 10,
            delta: 0.08,
            z: 3.0,
            mad_floor: 0.01,
            confirm_peers: 3,
            hard_hold_down: 30,
            hard_consecutive_reads: 3,
            hard_ecc_double_per_hour: 1,
            confirm_rounds: 2,
            confirm_hold: 6,
            congested_hold: 15,
            exit_rounds: 180,
            probation_rounds: 720,
            fabric_ratio: 1.0 / 0.9,
            fabric_rounds: 3,
            link_observations: 9,
        }
    }
}

/// `[device_probe]`: pings between the NPUs' own RoCE ports, the path training traffic takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceProbeSection {
    /// Probe the device plane when probing runs and `hccn_tool` and device IPs are found.
    pub enabled: bool,
    /// How often the device plane runs: on probe rounds this far apart (a whole number
    /// of `probe.interval`s, at least one), so that its ping budget and its engine's
    /// holds, counted in its own rounds, mean the same time whatever the host plane's
    /// cadence.
    #[serde(with = "duration::serde_str")]
    pub interval: Duration,
    /// Pings each NPU port sends per device-plane round (3 packets each).
    pub pings_per_round: u32,
    /// Packets per second per NPU the device plane may cost (sent and answered); the pings
    /// per round are cut to fit at `device_probe.interval`.
    pub max_packets_per_second: f64,
    /// Most re-pings (of suspect ports and pairs) this node runs per round.
    pub confirm_cap: u32,
    /// Drive the DCMI HCCS ping mesh (Atlas A3) when the device plane runs and DCMI offers it.
    pub hccs: bool,
    /// Rounds of the resident HCCS ping-mesh task (its `task_interval`): whole seconds,
    /// 1 s to 60 s.
    #[serde(with = "duration::serde_str")]
    pub hccs_round_interval: Duration,
    /// How often the HCCS ping-mesh results are read (and a stopped task restarted); at
    /// least one round interval plus a second.
    #[serde(with = "duration::serde_str")]
    pub hccs_read_interval: Duration,
    /// This node's super-pod: NPUs ping over HCCS only members with the same value (vNIC
    /// addresses repeat across super-pods). Unset on every member: one super-pod.
    pub hccs_super_pod: Option<u32>,
}

impl Default for DeviceProbeSection {
    fn default() -> Self {
        Self {
            enabled: true,
            interval: Duration::from_secs(20),
            pings_per_round: 4,
            max_packets_per_second: 1.5,
            confirm_cap: 16,
            hccs: true,
            hccs_round_interval: Duration::from_secs(5),
            hccs_read_interval: Duration::from_secs(30),
            hccs_super_pod: None,
        }
    }
}

/// `[collective]`: a static peer list and the engine's transport settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CollectiveConfig {
    /// Listen address of every member, in rank order.
    pub peers: Vec<String>,
    /// Names for the members in metric labels and logs (same order as `peers`), e.g. the
    /// Kubernetes node names, so probe series and device series name a node the same way.
    /// Empty: the addresses.
    pub peer_names: Vec<String>,
    /// A topology label per member (same order as `peers`), e.g. the rack or superpod:
    /// members probe only within their label, in groups of at most
    /// `probe.max_group_size`. Empty: one label for all.
    pub peer_topology: Vec<String>,
    /// This node's rank in `peers`; -1 finds it by matching a local address.
    pub rank: i64,
    /// `host:port` of a DNS name resolving to every member (e.g. a Kubernetes headless
    /// Service), instead of `peers`; re-resolved every `probe.dns_refresh`. Empty: unused.
    pub peers_dns: String,
    /// With `peers_dns`: this node's own `IP:port` among the resolved addresses. Empty:
    /// the resolved address on one of this host's interfaces.
    pub own_address: String,
    /// With `peers_dns`: the name this node announces to the group for metric labels.
    /// Empty: the `NODE_NAME` environment variable, else the host name.
    pub node_name: String,
    /// An HCCL rank table (`RANK_TABLE_FILE`) to take the members from instead of `peers`:
    /// one member per server, in order of first appearance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank_table_file: Option<PathBuf>,
    /// Port every member listens on when members come from the rank table.
    pub rank_table_port: u16,
    /// File holding the shared authentication key (at least 16 bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Connections per peer.
    pub channels: u32,
    /// Bound on connection setup (like `HCCL_CONNECT_TIMEOUT`).
    #[serde(with = "duration::serde_str")]
    pub connect_timeout: Duration,
    /// Bound on every operation (like `HCCL_EXEC_TIMEOUT`).
    #[serde(with = "duration::serde_str")]
    pub exec_timeout: Duration,
    /// `HCCL_ALGO` syntax; empty selects by α-β cost.
    pub algo: String,
    /// `HCCL_RDMA_TC`-style traffic class (DSCP × 4) for the IP TOS byte; -1 leaves it.
    pub traffic_class: i64,
    /// Bind outgoing connections to this interface (`SO_BINDTODEVICE`, needs root).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_device: Option<String>,
    /// Also MAC the probes' measurement payloads (control frames always are). The
    /// daemon's payloads are small, so this is on; `hcclwatch bench` leaves it off.
    pub authenticate_payloads: bool,
}

impl Default for CollectiveConfig {
    fn default() -> Self {
        Self {
            peers: Vec::new(),
            peer_names: Vec::new(),
            peer_topology: Vec::new(),
            rank: -1,
            peers_dns: String::new(),
            own_address: String::new(),
            node_name: String::new(),
            rank_table_file: None,
            rank_table_port: 60_100,
            key_file: None,
            channels: crate::collective::transport::default_channels() as u32,
            connect_timeout: Duration::from_secs(120),
            exec_timeout: Duration::from_secs(60),
            algo: String::new(),
            traffic_class: -1,
            bind_device: None,
            authenticate_payloads: true,
        }
    }
}

impl CollectiveConfig {
    /// Fills `peers` from `rank_table_file`, if one is set. The daemon is per node, so the
    /// members are the table's hosts, not its device ranks: each host's address is its
    /// first rank's `host_ip` (else `device_ip`) on `rank_table_port`.
    pub fn resolve_rank_table(&mut self) -> Result<(), (String, String)> {
        let Some(path) = &self.rank_table_file else {
            return Ok(());
        };
        let key = "collective.rank_table_file".to_string();
        if !self.peers.is_empty() {
            return Err((
                key,
                "set either collective.peers or collective.rank_table_file, not both".into(),
            ));
        }
        let text = file::read_text(path, file::RANK_TABLE_LIMIT)
            .map_err(|e| (key.clone(), format!("cannot read rank table: {e}")))?;
        let table = crate::collective::bootstrap::ranktable::parse(&text)
            .map_err(|e| (key.clone(), format!("{}: {e}", path.display())))?;
        // A node is known by its host address when the table gives one (v2.0 groups by
        // network instance, which can span hosts), else by its server id.
        let mut servers: HashSet<String> = HashSet::new();
        for r in &table.ranks {
            let id = r
                .host_ip
                .map_or_else(|| r.server_id.clone(), |ip| ip.to_string());
            if servers.contains(&id) {
                continue;
            }
            let ip = r.host_ip.or(r.device_ip).ok_or_else(|| {
                (
                    key.clone(),
                    format!(
                        "{}: server {:?} (rank {}) has neither host_ip nor device_ip",
                        path.display(),
                        r.server_id,
                        r.rank_id
                    ),
                )
            })?;
            servers.insert(id);
            self.peers
                .push(SocketAddr::new(ip, self.rank_table_port).to_string());
        }
        Ok(())
    }
}

/// `[web]`: where `/metrics` is served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebConfig {
    /// `host:port`, `[v6]:port` or `:port` (all interfaces).
    pub listen_address: String,
    /// Path of the metrics endpoint.
    pub telemetry_path: String,
    /// Also put `namespace`, `pod` and `container` on every per-NPU series (as
    /// dcgm-exporter does), for an NPU that exactly one pod uses.
    pub pod_labels: bool,
    // --- HTTP hardening (issue 18): web config file and server limits ---
    /// A Prometheus exporter-toolkit web config file (TLS, client CA, basic-auth users).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_file: Option<PathBuf>,
    /// Open connections at most; at the cap the connection idle longest is closed.
    pub max_connections: u32,
    /// Time a client has to send a request's head, counted from the connection's start
    /// or the end of the previous response (so it also ends idle keep-alive connections).
    #[serde(with = "duration::serde_str")]
    pub header_read_timeout: Duration,
    /// A connection that moves no byte in either direction for this long is closed.
    #[serde(with = "duration::serde_str")]
    pub idle_timeout: Duration,
    /// Largest request head (request line and headers), in bytes.
    pub max_header_bytes: u32,
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            listen_address: ":9478".into(),
            telemetry_path: "/metrics".into(),
            pod_labels: false,
            config_file: None,
            max_connections: 4096,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_header_bytes: 16 << 10,
        }
    }
}

/// Paths the daemon's server routes itself; `web.telemetry_path` must be none of them
/// (`export::server` checks that it routes exactly these).
pub const RESERVED_PATHS: &[&str] = &["/", "/-/healthy", "/-/ready", "/api/v1/state"];

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub level: String,
    /// Output format.
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Logfmt,
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `key=value` pairs, as Prometheus components log.
    #[default]
    Logfmt,
    /// One JSON object per line.
    Json,
}

/// Which device backend feeds NPU telemetry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// DCMI if it loads and initialises; otherwise no NPU telemetry, with a warning.
    #[default]
    Auto,
    /// DCMI, and refuse to start without it.
    Dcmi,
    /// Simulated chips (demo and tests only).
    Sim,
    /// No NPU telemetry.
    None,
}

impl Backend {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Dcmi => "dcmi",
            Backend::Sim => "sim",
            Backend::None => "none",
        }
    }
}

/// `[telemetry]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Device backend.
    pub backend: Backend,
    /// Explicit path to `libdcmi.so`; when unset the standard locations are searched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dcmi_library: Option<PathBuf>,
    /// Deadline for one DCMI call.
    #[serde(with = "duration::serde_str")]
    pub call_deadline: Duration,
    /// Deadline for `dcmi_get_device_network_health`, which blocks after a card drops.
    #[serde(with = "duration::serde_str")]
    pub network_health_deadline: Duration,
    /// How many DCMI calls may be stuck past their deadline at once before hcclwatch
    /// stops calling DCMI until one returns.
    pub max_stuck_calls: u32,
    /// Sampling window passed to `dcmi_get_hccs_link_bandwidth_info`.
    #[serde(with = "duration::serde_str")]
    pub hccs_profiling_time: Duration,
    /// Path of Ascend's `hccn_tool` (NPU ports, optics, device IPs, RoCE pings). When it
    /// is not an executable file, those readings are off.
    pub hccn_tool: PathBuf,
    /// `hccn.conf`: NPU ids and device IPs (`address_<phy>`) when DCMI or the tool have
    /// none.
    pub hccn_conf: PathBuf,
    /// Deadline of one `hccn_tool` query, its wait for a turn and busy retries included;
    /// the tool's process group is killed when it passes.
    #[serde(with = "duration::serde_str")]
    pub hccn_call_deadline: Duration,
    /// Deadline of one `hccn_tool -ping`.
    #[serde(with = "duration::serde_str")]
    pub hccn_ping_deadline: Duration,
    /// `hccn_tool` processes allowed at once, all NPUs together (one per NPU at most).
    pub hccn_max_calls_in_flight: u32,
    /// A fault-level table in MindCluster's `faultCode.json` format that replaces the
    /// built-in one (re-read on SIGHUP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault_levels_file: Option<PathBuf>,
    /// Collection interval per reading group.
    pub intervals: Intervals,
    /// Simulated backend settings.
    pub sim: SimConfig,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            backend: Backend::Auto,
            dcmi_library: None,
            call_deadline: Duration::from_secs(2),
            network_health_deadline: Duration::from_secs(1),
            max_stuck_calls: 4,
            hccs_profiling_time: Duration::from_millis(200),
            hccn_tool: PathBuf::from("/usr/local/Ascend/driver/tools/hccn_tool"),
            hccn_conf: PathBuf::from("/etc/hccn.conf"),
            hccn_call_deadline: Duration::from_secs(15),
            hccn_ping_deadline: Duration::from_secs(10),
            hccn_max_calls_in_flight: 8,
            fault_levels_file: None,
            intervals: Intervals::default(),
            sim: SimConfig::default(),
        }
    }
}

/// `[telemetry.intervals]`: how often each reading group is collected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Intervals {
    /// Chip list, model, PCIe address, UUID, serial, driver version.
    #[serde(with = "duration::serde_str")]
    pub inventory: Duration,
    /// Health, fault codes, network health.
    #[serde(with = "duration::serde_str")]
    pub health: Duration,
    /// Temperature, power, voltage, AI-core clock.
    #[serde(with = "duration::serde_str")]
    pub sensors: Duration,
    /// Utilisation ratios.
    #[serde(with = "duration::serde_str")]
    pub utilization: Duration,
    /// HBM, DDR and ECC.
    #[serde(with = "duration::serde_str")]
    pub memory: Duration,
    /// RoCE/MAC packet counters and HCCS.
    #[serde(with = "duration::serde_str")]
    pub network: Duration,
    /// Host CPU, memory and network interfaces.
    #[serde(with = "duration::serde_str")]
    pub host: Duration,
    /// NPU ports through `hccn_tool`: link, speed, link history, network health, device
    /// IPs, the counters DCMI does not give.
    #[serde(with = "duration::serde_str")]
    pub ports: Duration,
    /// Optical modules through `hccn_tool`.
    #[serde(with = "duration::serde_str")]
    pub optics: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Self {
            inventory: Duration::from_secs(60),
            health: Duration::from_secs(5),
            sensors: Duration::from_secs(5),
            utilization: Duration::from_secs(5),
            memory: Duration::from_secs(15),
            network: Duration::from_secs(30),
            host: Duration::from_secs(15),
            ports: Duration::from_secs(30),
            optics: Duration::from_secs(60),
        }
    }
}

/// `[telemetry.sim]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Number of simulated chips.
    pub chips: u32,
    /// Seed for the simulated values.
    pub seed: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self { chips: 8, seed: 1 }
    }
}

/// `[collectors]`: each collector can be switched off. The NPU inventory (chip list and
/// identity) is not switchable: every other NPU collector needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CollectorsConfig {
    /// NPU health and fault codes.
    pub health: bool,
    /// NPU temperature, power, voltage, clock.
    pub sensors: bool,
    /// NPU utilisation.
    pub utilization: bool,
    /// NPU HBM, DDR, ECC.
    pub memory: bool,
    /// NPU RoCE/MAC counters and HCCS.
    pub network: bool,
    /// Host CPU, memory, network interfaces.
    pub host: bool,
    /// NPU ports through `hccn_tool` (`npu_ports`).
    pub ports: bool,
    /// Optical modules through `hccn_tool` (`npu_optics`).
    pub optics: bool,
}

impl Default for CollectorsConfig {
    fn default() -> Self {
        Self {
            health: true,
            sensors: true,
            utilization: true,
            memory: true,
            network: true,
            host: true,
            ports: true,
            optics: true,
        }
    }
}

/// One problem found in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where: `PATH:LINE`, `PATH`, `env:VAR` or `flag --name`.
    pub location: String,
    /// Dotted key path, or `(document)` for syntax errors.
    pub key: String,
    /// Why it is wrong, and what to write instead where that is knowable.
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.location, self.key, self.reason)
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why: it is missing, not a regular file, too large, or the read hung.
        source: file::FileError,
    },
    /// The configuration has problems; every one is listed.
    #[error("invalid configuration:\n{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Problem>),
}

/// Where each key's value came from, for error messages.
#[derive(Debug, Default)]
struct Origins {
    file: Option<String>,
    text: String,
    spans: HashMap<String, usize>,
    env: HashMap<String, String>,
    /// Offsets of the line starts after the first, once indexed: a line number is then a
    /// binary search, not a scan, however many problems a long file has.
    line_starts: Vec<usize>,
}

impl Origins {
    fn index_lines(&mut self) {
        self.line_starts = self
            .text
            .bytes()
            .enumerate()
            .filter(|(_, b)| *b == b'\n')
            .map(|(i, _)| i + 1)
            .collect();
    }

    fn line_of(&self, offset: usize) -> usize {
        if self.line_starts.is_empty() {
            return self.text[..offset.min(self.text.len())]
                .matches('\n')
                .count()
                + 1;
        }
        self.line_starts.partition_point(|&start| start <= offset) + 1
    }

    fn locate(&self, path: &str) -> String {
        if let Some(var) = self.env.get(path) {
            return format!("env:{var}");
        }
        let file = self.file.as_deref().unwrap_or("<defaults>");
        // Fall back to the nearest enclosing table that appears in the file.
        let mut p = path;
        loop {
            if let Some(off) = self.spans.get(p) {
                return format!("{file}:{}", self.line_of(*off));
            }
            if p.is_empty() {
                return file.to_string();
            }
            p = schema::parent(p);
        }
    }
}

/// Loads the configuration from an optional file plus environment overrides.
///
/// `env` is passed in (rather than read here) so that tests never mutate the process
/// environment. The files the configuration names are not opened (except a rank table,
/// which fills `collective.peers`); [`load_checked`] also checks them.
pub fn load(file: Option<&Path>, env: &[(String, String)]) -> Result<Config, ConfigError> {
    load_inner(file, env, false).map(|l| l.config)
}

/// A configuration with the warnings found while checking it.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// Problems that do not stop the daemon (a world-readable key file).
    pub warnings: Vec<Problem>,
}

/// [`load`], and also checks the files the configuration names (the shared key, the web
/// config and its certificates), as `check-config`, start-up and SIGHUP do.
pub fn load_checked(file: Option<&Path>, env: &[(String, String)]) -> Result<Loaded, ConfigError> {
    load_inner(file, env, true)
}

fn load_inner(
    file: Option<&Path>,
    env: &[(String, String)],
    check_files: bool,
) -> Result<Loaded, ConfigError> {
    let (text, name) = match file {
        Some(p) => (
            file::read_text(p, file::CONFIG_LIMIT).map_err(|source| ConfigError::Read {
                path: p.to_path_buf(),
                source,
            })?,
            Some(p.display().to_string()),
        ),
        None => (String::new(), None),
    };
    load_str_inner(&text, name.as_deref(), env, check_files)
}

/// Loads from TOML text; `name` is used in messages (the file path).
pub fn load_str(
    text: &str,
    name: Option<&str>,
    env: &[(String, String)],
) -> Result<Config, ConfigError> {
    load_str_inner(text, name, env, false).map(|l| l.config)
}

/// Every problem is collected: a key that fails the schema is reported and then removed
/// (so it takes its default), and the semantic checks still run on the rest, so one run
/// shows all of it. Every step is linear in the size of the document.
fn load_str_inner(
    text: &str,
    name: Option<&str>,
    env: &[(String, String)],
    check_files: bool,
) -> Result<Loaded, ConfigError> {
    let mut origins = Origins {
        file: name.map(str::to_string),
        text: text.to_string(),
        ..Origins::default()
    };
    let mut problems = Vec::new();

    // Pass 1: spans of every key, for line numbers.
    match toml::de::DeTable::parse(text) {
        Ok(doc) => collect_spans(doc.get_ref(), "", &mut origins.spans),
        Err(e) => {
            let line = e.span().map_or(1, |s| origins.line_of(s.start));
            let msg = e.message().trim().replace('\n', " ");
            problems.push(Problem {
                location: format!("{}:{line}", name.unwrap_or("<input>")),
                key: "(document)".into(),
                reason: format!("TOML syntax error: {msg}"),
            });
            return Err(ConfigError::Invalid(problems));
        }
    }
    origins.index_lines();

    // Pass 2: the values, checked against the schema.
    let mut table: toml::Table = toml::from_str(text).map_err(|e| {
        ConfigError::Invalid(vec![Problem {
            location: name.unwrap_or("<input>").to_string(),
            key: "(document)".into(),
            reason: e.message().to_string(),
        }])
    })?;
    walk(&table, "", &origins, &mut problems);

    // Environment overrides.
    apply_env(&mut table, env, &mut origins, &mut problems);

    // Keys that failed the schema take their defaults, so the rest can still be checked.
    for p in &problems {
        let parts: Vec<&str> = p.key.split('.').collect();
        remove_path(&mut table, &parts);
    }
    let mut config: Config = match toml::Value::Table(table).try_into() {
        Ok(c) => c,
        Err(e) => {
            let e: toml::de::Error = e;
            problems.push(Problem {
                location: name.unwrap_or("<input>").to_string(),
                key: "(document)".into(),
                reason: e.message().to_string(),
            });
            return Err(ConfigError::Invalid(problems));
        }
    };
    let reported: HashSet<String> = problems.iter().map(|p| p.key.clone()).collect();
    let mut semantic = Vec::new();
    if let Err((key, reason)) = config.collective.resolve_rank_table() {
        semantic.push((key, reason));
    }
    semantic.extend(config.validate());
    let mut warnings = Vec::new();
    if check_files {
        let files = config.file_problems();
        semantic.extend(files.errors);
        warnings.extend(files.warnings.into_iter().map(|(key, reason)| Problem {
            location: origins.locate(&key),
            key,
            reason,
        }));
    }
    for (key, reason) in semantic {
        if reported.contains(&key) {
            continue;
        }
        problems.push(Problem {
            location: origins.locate(&key),
            key,
            reason,
        });
    }
    if problems.is_empty() {
        Ok(Loaded { config, warnings })
    } else {
        Err(ConfigError::Invalid(problems))
    }
}

/// Removes a dotted path from `table` (nothing if it is not there).
fn remove_path(table: &mut toml::Table, parts: &[&str]) {
    match parts {
        [] => {}
        [leaf] => {
            table.remove(*leaf);
        }
        [head, rest @ ..] => {
            if let Some(toml::Value::Table(t)) = table.get_mut(*head) {
                remove_path(t, rest);
            }
        }
    }
}

/// Problems with the files a configuration names, as (key, reason).
#[derive(Debug, Default)]
pub struct FileProblems {
    /// Files that cannot be used.
    pub errors: Vec<(String, String)>,
    /// Files that work but should be fixed.
    pub warnings: Vec<(String, String)>,
}

impl Config {
    /// Opens and checks every file the configuration names: the shared key (a regular
    /// file, one token of at least 16 bytes, not world-readable) and the web config.
    pub fn file_problems(&self) -> FileProblems {
        let mut out = FileProblems::default();
        if let Some(path) = &self.collective.key_file {
            match file::read_key(path) {
                Ok(k) if k.world_readable => out.warnings.push((
                    "collective.key_file".into(),
                    format!(
                        "{} is readable by every user (mode o+r); chmod 0400 it (Kubernetes: defaultMode: 0400)",
                        path.display()
                    ),
                )),
                Ok(_) => {}
                Err(e) => out
                    .errors
                    .push(("collective.key_file".into(), e.to_string())),
            }
        }
        if let Some(path) = &self.web.config_file
            && let Err(problems) = web::WebConfigFile::load(path)
        {
            out.errors.extend(
                problems
                    .into_iter()
                    .map(|p| ("web.config_file".to_string(), p)),
            );
        }
        out
    }
}

fn collect_spans(table: &toml::de::DeTable<'_>, prefix: &str, out: &mut HashMap<String, usize>) {
    for (k, v) in table.iter() {
        let path = join(prefix, k.get_ref());
        out.insert(path.clone(), k.span().start);
        if let toml::de::DeValue::Table(t) = v.get_ref() {
            collect_spans(t, &path, out);
        }
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// A key as TOML would write it: bare when it can be, else quoted (an empty key, or one
/// with dots or spaces, must still be visible in a message).
fn shown_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

fn walk(table: &toml::Table, prefix: &str, origins: &Origins, problems: &mut Vec<Problem>) {
    for (k, v) in table {
        let path = join(prefix, k);
        let Some(key) = schema::lookup(&path) else {
            problems.push(Problem {
                location: origins.locate(&path),
                key: join(prefix, &shown_key(k)),
                reason: format!("unknown key; did you mean `{}`?", schema::nearest(&path)),
            });
            continue;
        };
        match schema::check_value(key.kind, v) {
            Ok(()) => {
                if let toml::Value::Table(t) = v {
                    walk(t, &path, origins, problems);
                }
            }
            Err(reason) => problems.push(Problem {
                location: origins.locate(&path),
                key: path,
                reason,
            }),
        }
    }
}

fn apply_env(
    table: &mut toml::Table,
    env: &[(String, String)],
    origins: &mut Origins,
    problems: &mut Vec<Problem>,
) {
    for (var, text) in env {
        let Some(_) = var.strip_prefix("HCCLWATCH_") else {
            continue;
        };
        let Some(key) = schema::SCHEMA
            .iter()
            .find(|k| !matches!(k.kind, schema::Kind::Table) && schema::env_name(k.path) == *var)
        else {
            let guess = schema::SCHEMA
                .iter()
                .filter(|k| !matches!(k.kind, schema::Kind::Table))
                .map(|k| schema::env_name(k.path))
                .min_by_key(|n| schema::levenshtein(n, var))
                .unwrap_or_default();
            problems.push(Problem {
                location: format!("env:{var}"),
                key: var.clone(),
                reason: format!("unknown environment override; did you mean {guess}?"),
            });
            continue;
        };
        origins.env.insert(key.path.to_string(), var.clone());
        let value = match schema::value_from_env(key.kind, text).and_then(|v| {
            schema::check_value(key.kind, &v)?;
            Ok(v)
        }) {
            Ok(v) => v,
            Err(reason) => {
                problems.push(Problem {
                    location: format!("env:{var}"),
                    key: key.path.to_string(),
                    reason,
                });
                continue;
            }
        };
        let parts: Vec<&str> = key.path.split('.').collect();
        insert_path(table, &parts, value);
    }
}

/// Sets `parts` (a dotted path) in `table`, creating tables on the way. A non-table in
/// the way was already reported by the schema walk, so it is left alone.
fn insert_path(table: &mut toml::Table, parts: &[&str], value: toml::Value) {
    match parts {
        [] => {}
        [leaf] => {
            table.insert((*leaf).to_string(), value);
        }
        [head, rest @ ..] => {
            let entry = table
                .entry((*head).to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(t) = entry {
                insert_path(t, rest, value);
            }
        }
    }
}

impl Config {
    /// Semantic checks that need more than one value's type: addresses, paths, and
    /// relations between keys. Returns `(key.path, reason)` pairs.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        self.web_problems(&mut out);
        self.membership_problems(&mut out);
        self.health_problems(&mut out);
        self.device_interval_problems(&mut out);
        self.hccs_problems(&mut out);
        self.otlp_problems(&mut out);
        self.group_problems(&mut out);
        self.engine_problems(&mut out);
        self.telemetry_problems(&mut out);
        self.attribution_problems(&mut out);
        out
    }

    /// `[web]`: the listen address and the metrics path.
    fn web_problems(&self, out: &mut Vec<(String, String)>) {
        if let Err(e) = parse_listen_address(&self.web.listen_address) {
            out.push(("web.listen_address".into(), e));
        }
        let p = &self.web.telemetry_path;
        if !p.starts_with('/') {
            out.push((
                "web.telemetry_path".into(),
                format!("{p:?} must start with '/'"),
            ));
        } else if RESERVED_PATHS.contains(&p.as_str()) {
            out.push((
                "web.telemetry_path".into(),
                format!("{p:?} is reserved for another endpoint; use e.g. \"/metrics\""),
            ));
        } else if !p
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c))
        {
            out.push((
                "web.telemetry_path".into(),
                format!("{p:?} may only contain letters, digits, '/', '_', '.' and '-'"),
            ));
        }
    }

    /// Where the members come from, and what probing needs of them.
    fn membership_problems(&self, out: &mut Vec<(String, String)>) {
        let c = &self.collective;
        if !c.peers_dns.is_empty() {
            match c.peers_dns.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {}
                _ => out.push((
                    "collective.peers_dns".into(),
                    format!("{:?} is not host:port (e.g. \"hcclwatch.monitoring.svc.cluster.local:60100\")", c.peers_dns),
                )),
            }
            if !c.peers.is_empty() || c.rank_table_file.is_some() {
                out.push((
                    "collective.peers_dns".into(),
                    "set one of collective.peers, collective.rank_table_file and collective.peers_dns".into(),
                ));
            }
        }
        for (i, e) in self.probe.inject_peer_throttle.iter().enumerate() {
            if let Err(why) = parse_peer_throttle(e) {
                out.push((
                    "probe.inject_peer_throttle".into(),
                    format!("element {i} ({e:?}): {why}"),
                ));
            }
        }
        if !c.own_address.is_empty() && c.own_address.parse::<std::net::SocketAddr>().is_err() {
            out.push((
                "collective.own_address".into(),
                format!("{:?} is not IP:port", c.own_address),
            ));
        }
        if self.probe.enabled && c.peers_dns.is_empty() && c.peers.len() < 2 {
            out.push((
                "probe.enabled".into(),
                "probing needs at least 2 members in collective.peers (or the rank table, or collective.peers_dns)".into(),
            ));
        }
        if self.probe.enabled && self.collective.key_file.is_none() {
            out.push((
                "probe.enabled".into(),
                "probing needs collective.key_file (the peers authenticate with it)".into(),
            ));
        }
    }

    /// `[device_probe]` HCCS intervals the ping-mesh task cannot take.
    fn hccs_problems(&self, out: &mut Vec<(String, String)>) {
        let d = &self.device_probe;
        if d.hccs_round_interval.subsec_nanos() != 0 {
            out.push((
                "device_probe.hccs_round_interval".into(),
                format!(
                    "{:?} is not whole seconds (the DCMI task interval is in seconds)",
                    d.hccs_round_interval
                ),
            ));
        }
        if d.hccs_read_interval < d.hccs_round_interval + Duration::from_secs(1) {
            out.push((
                "device_probe.hccs_read_interval".into(),
                format!(
                    "{:?} is shorter than device_probe.hccs_round_interval ({:?}) plus 1 s; a read would find no new round",
                    d.hccs_read_interval, d.hccs_round_interval
                ),
            ));
        }
    }

    /// `[device_probe] interval` against the probe rounds it runs on.
    fn device_interval_problems(&self, out: &mut Vec<(String, String)>) {
        let (d, p) = (self.device_probe.interval, self.probe.interval);
        if d < p {
            out.push((
                "device_probe.interval".into(),
                format!(
                    "{} is shorter than probe.interval ({}); the device plane runs on probe rounds, at most once each",
                    crate::config::duration::format(d),
                    crate::config::duration::format(p)
                ),
            ));
        }
    }

    /// `[health]` thresholds that contradict each other.
    fn health_problems(&self, out: &mut Vec<(String, String)>) {
        if self.health.fabric_rounds > self.health.window {
            out.push((
                "health.fabric_rounds".into(),
                format!(
                    "{} is more than health.window ({}); a fabric verdict could never form",
                    self.health.fabric_rounds, self.health.window
                ),
            ));
        }
        if self.health.congested_hold < self.health.confirm_hold {
            out.push((
                "health.congested_hold".into(),
                format!(
                    "{} is less than health.confirm_hold ({}); congestion on a node's uplink \
                     would shorten its hold instead of lengthening it",
                    self.health.congested_hold, self.health.confirm_hold
                ),
            ));
        }
    }

    /// `[otlp]`: the endpoint and headers.
    fn otlp_problems(&self, out: &mut Vec<(String, String)>) {
        let o = &self.otlp;
        let http = o.endpoint.starts_with("http://") || o.endpoint.starts_with("https://");
        if !(o.endpoint.is_empty() || http) {
            out.push((
                "otlp.endpoint".into(),
                format!(
                    "{:?} is not an http:// or https:// URL (e.g. \"http://otel-collector:4318\")",
                    o.endpoint
                ),
            ));
        }
        for (i, h) in o.headers.iter().enumerate() {
            if h.split_once('=').is_none_or(|(k, _)| k.trim().is_empty()) {
                out.push((
                    "otlp.headers".into(),
                    format!("element {i} ({h:?}) is not name=value"),
                ));
            }
        }
    }

    /// Per-member lists (topology, names) against the member list, and the rank.
    fn group_problems(&self, out: &mut Vec<(String, String)>) {
        let c = &self.collective;
        if !c.peer_topology.is_empty() && c.peer_topology.len() != c.peers.len() {
            out.push((
                "collective.peer_topology".into(),
                format!(
                    "{} labels for {} members; give one label per member of collective.peers, in the same order",
                    c.peer_topology.len(),
                    c.peers.len()
                ),
            ));
        } else if self.probe.enabled && !c.peer_topology.is_empty() {
            let mut count: HashMap<&str, usize> = HashMap::new();
            for label in &c.peer_topology {
                *count.entry(label.as_str()).or_default() += 1;
            }
            // The first lonely label in member order, as before.
            if let Some(label) = c.peer_topology.iter().find(|l| count[l.as_str()] < 2) {
                out.push((
                    "collective.peer_topology".into(),
                    format!(
                        "label {label:?} has a single member, which would have nobody to probe"
                    ),
                ));
            }
        }
        if !c.peer_names.is_empty() && c.peer_names.len() != c.peers.len() {
            out.push((
                "collective.peer_names".into(),
                format!(
                    "{} names for {} members; give one name per member of collective.peers (or the rank table), in the same order",
                    c.peer_names.len(),
                    c.peers.len()
                ),
            ));
        }
        if c.rank >= 0 && c.rank as usize >= c.peers.len() {
            out.push((
                "collective.rank".into(),
                format!(
                    "rank {} but collective.peers lists {} members",
                    c.rank,
                    c.peers.len()
                ),
            ));
        }
    }

    /// The engine's traffic class and algorithm override.
    fn engine_problems(&self, out: &mut Vec<(String, String)>) {
        let c = &self.collective;
        if c.traffic_class >= 0 && c.traffic_class % 4 != 0 {
            out.push((
                "collective.traffic_class".into(),
                format!(
                    "{} is not a multiple of 4 (it is DSCP × 4)",
                    c.traffic_class
                ),
            ));
        }
        if !c.algo.is_empty()
            && let Err(e) = crate::collective::algo::select::parse_hccl_algo(&c.algo)
        {
            out.push(("collective.algo".into(), e.to_string()));
        }
    }

    /// `[attribution]`: a prefix list that could never match, and a deadline that the next
    /// pass would overtake.
    fn attribution_problems(&self, out: &mut Vec<(String, String)>) {
        let a = &self.attribution;
        if a.resource_prefixes.is_empty() {
            out.push((
                "attribution.resource_prefixes".into(),
                "empty: no device would ever be attributed; remove the key for the default".into(),
            ));
        }
        if a.deadline >= a.interval {
            out.push((
                "attribution.deadline".into(),
                format!(
                    "{} is not shorter than attribution.interval ({})",
                    duration::format(a.deadline),
                    duration::format(a.interval)
                ),
            ));
        }
    }

    /// `[telemetry]`: the DCMI library path and the `hccn_tool` paths.
    fn telemetry_problems(&self, out: &mut Vec<(String, String)>) {
        if let Some(lib) = &self.telemetry.dcmi_library
            && lib.as_os_str().is_empty()
        {
            out.push((
                "telemetry.dcmi_library".into(),
                "empty path; remove the key to search the standard locations".into(),
            ));
        }
        for (key, path) in [
            ("telemetry.hccn_tool", &self.telemetry.hccn_tool),
            ("telemetry.hccn_conf", &self.telemetry.hccn_conf),
        ] {
            if !path.is_absolute() {
                out.push((
                    key.into(),
                    format!(
                        "{:?} is not an absolute path; the tool is run without a shell or PATH lookup",
                        path.display()
                    ),
                ));
            }
        }
        if let Some(f) = &self.telemetry.fault_levels_file
            && f.as_os_str().is_empty()
        {
            out.push((
                "telemetry.fault_levels_file".into(),
                "empty path; remove the key to use the built-in fault-level table".into(),
            ));
        }
    }
}

/// Parses `host:port`, `[v6]:port` or `:port` (meaning all IPv4 interfaces).
pub fn parse_listen_address(s: &str) -> Result<SocketAddr, String> {
    let full = if let Some(port) = s.strip_prefix(':') {
        format!("0.0.0.0:{port}")
    } else {
        s.to_string()
    };
    if let Ok(a) = full.parse::<SocketAddr>() {
        return Ok(a);
    }
    let Some((host, port)) = full.rsplit_once(':') else {
        return Err(format!(
            "{s:?} has no port; write e.g. \":9478\" or \"127.0.0.1:9478\""
        ));
    };
    if port.parse::<u16>().is_err() {
        return Err(format!("{s:?}: port {port:?} is not a number in 0..=65535"));
    }
    if host.is_empty() {
        return Err(format!("{s:?} has an empty host"));
    }
    full.to_socket_addrs()
        .map_err(|e| format!("{s:?}: cannot resolve host {host:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{s:?}: host {host:?} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_come_from_a_rank_table_one_per_host() {
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("rank_table.json");
        std::fs::write(
            &table,
            r#"{"version":"1.0","server_list":[
              {"server_id":"node_0","host_ip":"10.0.0.1","device":[
                {"device_id":"0","device_ip":"192.168.1.8","rank_id":"0"},
                {"device_id":"1","device_ip":"192.168.1.9","rank_id":"1"}]},
              {"server_id":"node_1","device":[
                {"device_id":"0","device_ip":"192.168.2.8","rank_id":"2"},
                {"device_id":"1","device_ip":"192.168.2.9","rank_id":"3"}]}]}"#,
        )
        .unwrap();
        let text = format!(
            "[collective]\nrank_table_file = \"{}\"\nrank_table_port = 7000\n",
            table.display()
        );
        let cfg = load_str(&text, Some("t.toml"), &[]).unwrap();
        assert_eq!(
            cfg.collective.peers,
            vec!["10.0.0.1:7000".to_string(), "192.168.2.8:7000".to_string()]
        );

        let both = format!("{text}peers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\n");
        let err = load_str(&both, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t.toml:2: collective.rank_table_file: set either"),
            "{err}"
        );

        std::fs::write(&table, "{\"version\":\"1.0\"}").unwrap();
        let err = load_str(&text, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("{}: server_list: missing", table.display())),
            "{err}"
        );

        let missing = text.replace("rank_table.json", "absent.json");
        let err = load_str(&missing, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cannot read") && err.contains("absent.json"),
            "{err}"
        );
    }

    /// The fuzzer's finding: an empty (quoted) key was reported with an empty key name.
    #[test]
    fn an_empty_or_quoted_unknown_key_is_shown_quoted() {
        let p = problems("\"\" = 1\n[web]\n\"a b\" = 2\n", &[]);
        assert!(p.iter().any(|l| l.contains(": \"\": unknown key")), "{p:?}");
        assert!(
            p.iter().any(|l| l.contains(": web.\"a b\": unknown key")),
            "{p:?}"
        );
    }

    fn problems(text: &str, env: &[(&str, &str)]) -> Vec<String> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        match load_str(text, Some("test.toml"), &env) {
            Ok(_) => vec![],
            Err(ConfigError::Invalid(p)) => p.iter().map(ToString::to_string).collect(),
            Err(e) => vec![e.to_string()],
        }
    }

    #[test]
    fn empty_document_is_defaults() {
        assert_eq!(load_str("", None, &[]).unwrap(), Config::default());
    }

    #[test]
    fn every_struct_field_is_in_the_schema() {
        // Serializing the defaults yields every field; walking that document against the
        // schema must find no unknown key.
        let mut cfg = Config::default();
        cfg.telemetry.dcmi_library = Some("/x/libdcmi.so".into());
        cfg.telemetry.fault_levels_file = Some("/x/faultCode.json".into());
        cfg.collective.key_file = Some("/x/key".into());
        cfg.collective.bind_device = Some("eth0".into());
        cfg.attribution.kubeconfig = Some("/x/kubeconfig".into());
        cfg.web.config_file = Some("/x/web.yml".into());
        cfg.device_probe.hccs_super_pod = Some(0);
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("rank_table.json");
        std::fs::write(
            &table,
            r#"{"version":"1.0","server_list":[{"server_id":"a","host_ip":"10.0.0.1",
              "device":[{"device_id":"0","device_ip":"10.1.0.1","rank_id":"0"}]}]}"#,
        )
        .unwrap();
        cfg.collective.rank_table_file = Some(table);
        let text = toml::to_string(&cfg).unwrap();
        assert_eq!(problems(&text, &[]), Vec::<String>::new(), "{text}");
        // And the converse: every schema leaf is set in that document.
        let table: toml::Table = toml::from_str(&text).unwrap();
        for key in schema::SCHEMA {
            let mut cur = &table;
            let mut found = true;
            let parts: Vec<&str> = key.path.split('.').collect();
            for (i, part) in parts.iter().enumerate() {
                match cur.get(*part) {
                    Some(toml::Value::Table(t)) => cur = t,
                    Some(_) if i == parts.len() - 1 => {}
                    _ => found = false,
                }
            }
            assert!(found, "schema key {} is not a struct field", key.path);
        }
    }

    #[test]
    fn reports_every_problem_with_line_and_nearest_key() {
        let text = "\
[web]
listen_adress = \":9478\"

[telemetry]
backend = \"cuda\"
call_deadline = 5
max_stuck_calls = 0

[telemetry.intervals]
helth = \"5s\"
";
        let p = problems(text, &[]);
        assert_eq!(p.len(), 5, "{p:#?}");
        for expected in [
            "test.toml:2: web.listen_adress: unknown key; did you mean `web.listen_address`?",
            "test.toml:5: telemetry.backend: \"cuda\" is not one of auto, dcmi, sim, none",
            "test.toml:6: telemetry.call_deadline: expected a duration string such as \"5s\", found an integer",
            "test.toml:7: telemetry.max_stuck_calls: 0 is out of range 1..=64",
            "test.toml:10: telemetry.intervals.helth: unknown key; did you mean `telemetry.intervals.health`?",
        ] {
            assert!(
                p.iter().any(|l| l == expected),
                "missing {expected:?} in {p:#?}"
            );
        }
    }

    #[test]
    fn syntax_error_has_line() {
        let p = problems("[web]\nlisten_address = \n", &[]);
        assert_eq!(p.len(), 1);
        assert!(
            p[0].starts_with("test.toml:2: (document): TOML syntax error"),
            "{p:?}"
        );
    }

    #[test]
    fn table_where_value_expected_and_vice_versa() {
        let p = problems("web = 3\n", &[]);
        assert_eq!(
            p,
            vec!["test.toml:1: web: expected a table, found an integer"]
        );
        let p = problems("[collectors.host]\nx = 1\n", &[]);
        assert_eq!(
            p,
            vec!["test.toml:1: collectors.host: expected true or false, found a table"]
        );
    }

    #[test]
    fn semantic_errors_are_located() {
        let p = problems(
            "[web]\nlisten_address = \"nonsense\"\ntelemetry_path = \"metrics\"\n",
            &[],
        );
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p[0].starts_with("test.toml:2: web.listen_address: \"nonsense\" has no port"),
            "{p:?}"
        );
        assert!(
            p[1].starts_with("test.toml:3: web.telemetry_path: \"metrics\" must start with '/'"),
            "{p:?}"
        );
        let p = problems("[web]\ntelemetry_path = \"/-/ready\"\n", &[]);
        assert!(p[0].contains("reserved"), "{p:?}");
        let p = problems("[telemetry]\ndcmi_library = \"\"\n", &[]);
        assert!(p[0].contains("empty path"), "{p:?}");
        let p = problems("[web]\nlisten_address = \":99999\"\n", &[]);
        assert!(p[0].contains("not a number in 0..=65535"), "{p:?}");
    }

    #[test]
    fn env_overrides_file_and_is_checked() {
        let env = vec![
            ("HCCLWATCH_TELEMETRY_BACKEND".to_string(), "sim".to_string()),
            ("HCCLWATCH_COLLECTORS_HOST".to_string(), "false".to_string()),
            ("PATH".to_string(), "/bin".to_string()),
        ];
        let cfg = load_str("[telemetry]\nbackend = \"dcmi\"\n", None, &env).unwrap();
        assert_eq!(cfg.telemetry.backend, Backend::Sim);
        assert!(!cfg.collectors.host);

        let p = problems("", &[("HCCLWATCH_TELEMETRY_BACKND", "sim")]);
        assert_eq!(
            p,
            vec![
                "env:HCCLWATCH_TELEMETRY_BACKND: HCCLWATCH_TELEMETRY_BACKND: unknown environment override; did you mean HCCLWATCH_TELEMETRY_BACKEND?"
            ]
        );
        let p = problems("", &[("HCCLWATCH_TELEMETRY_SIM_CHIPS", "many")]);
        assert_eq!(
            p,
            vec![
                "env:HCCLWATCH_TELEMETRY_SIM_CHIPS: telemetry.sim.chips: \"many\" is not an integer"
            ]
        );
        let p = problems("", &[("HCCLWATCH_WEB_LISTEN_ADDRESS", "bad")]);
        assert_eq!(p.len(), 1);
        assert!(
            p[0].starts_with("env:HCCLWATCH_WEB_LISTEN_ADDRESS: web.listen_address:"),
            "{p:?}"
        );
    }

    #[test]
    fn collective_section() {
        let cfg = load_str(
            "[collective]\npeers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\nrank = 1\nalgo = \"level0:NA;level1:ring\"\n",
            None,
            &[],
        )
        .unwrap();
        assert_eq!(cfg.collective.peers.len(), 2);
        let p = problems(
            "[collective]\npeers = [\"127.0.0.1:1\"]\nrank = 3\ntraffic_class = 130\nalgo = \"level1:fast\"\n",
            &[],
        );
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(
            p[0].starts_with(
                "test.toml:3: collective.rank: rank 3 but collective.peers lists 1 members"
            ),
            "{p:?}"
        );
        assert!(
            p[1].contains("collective.traffic_class: 130 is not a multiple of 4"),
            "{p:?}"
        );
        assert!(
            p[2].contains("collective.algo: algo \"fast\" is not supported"),
            "{p:?}"
        );
        let p = problems("[collective]\npeers = [\"nowhere\"]\n", &[]);
        assert_eq!(
            p,
            vec![
                "test.toml:2: collective.peers: element 0 (\"nowhere\") is not an IP:port address"
            ]
        );
    }

    #[test]
    fn health_section() {
        let cfg = load_str("[health]\nwindow = 20\ndelta = 0.1\nz = 4\n", None, &[]).unwrap();
        let e = &cfg.health;
        assert_eq!((e.window, e.delta, e.z), (20, 0.1, 4.0));
        let p = problems(
            "[health]\ndelta = \"big\"\nz = 100.0\nwindow = 5\nfabric_rounds = 6\n",
            &[],
        );
        // Every problem, the schema's and the semantic ones together (issue 18).
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(
            p[2].contains("health.fabric_rounds: 6 is more than"),
            "{p:?}"
        );
        assert_eq!(
            p[0],
            "test.toml:2: health.delta: expected a number, found a string"
        );
        assert_eq!(p[1], "test.toml:3: health.z: 100 is out of range 0.5..=50");
        let p = problems("[health]\nwindow = 5\nfabric_rounds = 6\n", &[]);
        assert!(
            p[0].starts_with("test.toml:3: health.fabric_rounds: 6 is more than health.window (5)"),
            "{p:?}"
        );
        let p = problems(
            "[probe]\ninterval = \"10s\"\n[device_probe]\ninterval = \"5s\"\n",
            &[],
        );
        assert!(
            p[0].contains("device_probe.interval: 5s is shorter than probe.interval (10s)"),
            "{p:?}"
        );
        let p = problems("[health]\nconfirm_hold = 9\ncongested_hold = 4\n", &[]);
        assert!(
            p[0].contains("health.congested_hold: 4 is less than health.confirm_hold (9)"),
            "{p:?}"
        );
        let cfg = load_str("", None, &[("HCCLWATCH_HEALTH_DELTA".into(), "0.2".into())]).unwrap();
        assert_eq!(cfg.health.delta, 0.2);
    }

    #[test]
    fn hccs_intervals_are_checked() {
        let ok = "[device_probe]\nhccs_round_interval = \"2s\"\nhccs_read_interval = \"3s\"\n";
        assert_eq!(problems(ok, &[]), Vec::<String>::new());
        let p = problems("[device_probe]\nhccs_round_interval = \"1500ms\"\n", &[]);
        assert!(p.iter().any(|l| l.contains("not whole seconds")), "{p:?}");
        let p = problems(
            "[device_probe]\nhccs_round_interval = \"10s\"\nhccs_read_interval = \"10s\"\n",
            &[],
        );
        assert!(
            p.iter()
                .any(|l| l.contains("device_probe.hccs_read_interval") && l.contains("plus 1 s")),
            "{p:?}"
        );
        let p = problems("[device_probe]\nhccs_round_interval = \"61s\"\n", &[]);
        assert!(
            p.iter()
                .any(|l| l.contains("device_probe.hccs_round_interval")),
            "{p:?}"
        );
    }

    #[test]
    fn listen_address_forms() {
        assert_eq!(
            parse_listen_address(":9478").unwrap(),
            "0.0.0.0:9478".parse().unwrap()
        );
        assert_eq!(
            parse_listen_address("127.0.0.1:1").unwrap(),
            "127.0.0.1:1".parse().unwrap()
        );
        assert_eq!(
            parse_listen_address("[::1]:9478").unwrap(),
            "[::1]:9478".parse().unwrap()
        );
        assert!(parse_listen_address("localhost:9478").is_ok());
        assert!(parse_listen_address(":").is_err());
    }

    #[test]
    fn peer_names_need_one_distinct_name_per_member() {
        let ok = "[collective]\npeers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\npeer_names = [\"node-a\", \"node-b\"]\n";
        let cfg = load_str(ok, Some("t.toml"), &[]).unwrap();
        assert_eq!(cfg.collective.peer_names, vec!["node-a", "node-b"]);

        let short = ok.replace(", \"node-b\"", "");
        let err = load_str(&short, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t.toml:3: collective.peer_names: 1 names for 2 members"),
            "{err}"
        );

        let twice = ok.replace("node-b", "node-a");
        let err = load_str(&twice, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("collective.peer_names: element 1 (node-a) is listed twice"),
            "{err}"
        );
    }

    #[test]
    fn topology_labels_match_the_members_and_leave_nobody_alone() {
        let base = "[collective]\npeers = [\"127.0.0.1:1\", \"127.0.0.1:2\", \"127.0.0.1:3\"]\n";
        let short = format!("{base}peer_topology = [\"a\", \"a\"]\n");
        let err = load_str(&short, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("collective.peer_topology: 2 labels for 3 members"),
            "{err}"
        );
        let alone = format!(
            "{base}peer_topology = [\"a\", \"a\", \"b\"]\nkey_file = \"/k\"\n[probe]\nenabled = true\n"
        );
        let err = load_str(&alone, Some("t.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("label \"b\" has a single member"), "{err}");
        let ok = format!("{base}peer_topology = [\"a\", \"a\", \"a\"]\n");
        assert!(load_str(&ok, Some("t.toml"), &[]).is_ok());
    }

    /// Pins: every problem is reported, not only the first: each bad element of a list,
    /// and the semantic problems next to the schema's (before, a range error hid the rest).
    #[test]
    fn every_problem_not_only_the_first() {
        let p = problems(
            "[web]\ntelemetry_path = \"/api/v1/state\"\n[collective]\npeers = [\"x\", \"127.0.0.1:1\", \"y\", \"127.0.0.1:1\"]\nchannels = 99\n",
            &[],
        );
        let text = p.join("\n");
        for want in [
            "element 0 (\"x\") is not an IP:port address",
            "element 2 (\"y\") is not an IP:port address",
            "element 3 (127.0.0.1:1) is listed twice",
            "collective.channels: 99 is out of range 1..=16",
            "web.telemetry_path: \"/api/v1/state\" is reserved",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
    }

    /// Pins: a telemetry path that collides with any route of the server is refused (a
    /// path equal to /api/v1/state used to pass and then panic the router at start).
    #[test]
    fn telemetry_path_cannot_shadow_a_route() {
        for path in RESERVED_PATHS {
            let p = problems(&format!("[web]\ntelemetry_path = \"{path}\"\n"), &[]);
            assert_eq!(p.len(), 1, "{path}: {p:?}");
            assert!(p[0].contains("is reserved"), "{path}: {p:?}");
        }
    }

    /// Pins: validation is linear in the number of members. Duplicates used to be found
    /// by comparing every pair (50,000 peers: over a billion comparisons); a list this long
    /// with a duplicate at the end now takes well under the bound.
    #[test]
    fn long_member_lists_are_checked_in_linear_time() {
        let n = 50_000;
        let peers: Vec<String> = (0..n)
            .map(|i| format!("\"10.{}.{}.{}:60100\"", i / 65536, (i / 256) % 256, i % 256))
            .collect();
        let names: Vec<String> = (0..n).map(|i| format!("\"node-{i}\"")).collect();
        let topo: Vec<String> = (0..n).map(|i| format!("\"rack-{}\"", i / 8)).collect();
        let text = format!(
            "[collective]\npeers = [{}, \"10.0.0.0:60100\"]\npeer_names = [{}, \"node-0\"]\npeer_topology = [{}, \"rack-0\"]\nkey_file = \"/k\"\n[probe]\nenabled = true\n",
            peers.join(","),
            names.join(","),
            topo.join(",")
        );
        let t = std::time::Instant::now();
        let p = problems(&text, &[]);
        let took = t.elapsed();
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
        let text = p.join("\n");
        assert!(
            text.contains("element 50000 (10.0.0.0:60100) is listed twice"),
            "{text}"
        );
        assert!(
            text.contains("element 50000 (node-0) is listed twice"),
            "{text}"
        );
    }
}
