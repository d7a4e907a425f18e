//! Probing settings, and how they follow from the configuration: who the members are (a
//! static list, an HCCL rank table already folded into it by the config, or a DNS name),
//! this node's probe group and its communicator id, the shared key, the engine transport,
//! and the health engine's thresholds.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::congestion::CongestionSettings;
use super::device::DeviceSettings;
use super::device::runner::Pinger;
use super::membership::{self, Candidate, Source};
use crate::collective::CommConfig;
use crate::collective::identity::{MemberIdentity, Subject};
use crate::collective::transport::{FaultSpec, TransportConfig};
use crate::config::identity::{IdentityFileError, IdentityFiles};
use crate::config::types::{DnsTarget, PeerAddr, RankSpec, TrafficClass};
use crate::config::{Config, HealthSection, ProbeSection};
use crate::health::HealthConfig;
use crate::health::device::DeviceConfig;
use crate::health::hardware::Signs;

/// Probing settings.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// Where the members come from.
    pub source: Source,
    /// Address the probe listener binds.
    pub listen: SocketAddr,
    /// A member that has not accepted a connection for this long is left out of the group
    /// until it does again.
    pub member_timeout: Duration,
    /// The name this node announces to a DNS-discovered group.
    pub own_name: String,
    /// Fault injection on every exchange this node sends (tests and the demo).
    pub inject: Option<FaultSpec>,
    /// Fault injection on what this node sends to one peer (by probe address); overrides
    /// `inject` for that peer.
    pub inject_peers: Vec<(SocketAddr, FaultSpec)>,
    /// Engine transport and timeouts.
    pub comm: CommConfig,
    /// Time between round starts.
    pub interval: Duration,
    /// Probe rounds per device-plane round (see [`device_every`]); the same on every
    /// member, device plane or not, since every member takes part in its exchange.
    pub device_every: u64,
    /// Bytes of the latency all-reduce.
    pub small_bytes: usize,
    /// Bytes of each permutation and confirmation exchange.
    pub link_bytes: usize,
    /// A ring all-reduce every this many rounds (0: never).
    pub ring_every: u64,
    /// Bytes of the ring all-reduce.
    pub ring_bytes: usize,
    /// Probe bytes this node may send per hour (0: unlimited). Over budget, the group
    /// drops to latency-sized exchanges and skips the ring until usage falls.
    pub budget_bytes_per_hour: u64,
    /// Fraction of wall time this node may spend in probe rounds, over the last hour (0:
    /// unlimited). Over it, the group runs reduced rounds as for the byte budget.
    pub budget_busy_ratio: f64,
    /// Engine thresholds.
    pub health: HealthConfig,
    /// Fault injection (tests only): lie in every report to the group.
    pub inject_lies: bool,
    /// Fault injection (tests only): send an oversize engine-state hand-over.
    pub inject_oversize_handover: bool,
    /// Fault injection (tests only): rewrite the probe rows of the member at this probe
    /// address as this member relays them.
    pub inject_forge_relayed: Option<std::net::SocketAddr>,
    /// The lowest wire version the group may speak (`collective.min_wire_version`).
    pub min_wire_version: u8,
    /// Certificate mode: this node's identity files, read at every formation.
    pub identity: Option<IdentityFiles>,
    /// How long a member that broke the hand-over is left out (`probe.exclusion`).
    pub exclusion: Duration,
    /// Fault injection (tests and the demo): hardware signs reported every round.
    pub inject_signs: Signs,
    /// When a telemetry reading is a hard fault.
    pub hard_faults: super::hard_faults::HardFaultRules,
    /// The device plane, when this node probes it (the composition root supplies the
    /// pinger; see [`device_settings`]).
    pub device: Option<DeviceSettings>,
    /// Reading this node's own uplink congestion.
    pub congestion: CongestionSettings,
    /// How long probing waits at startup for the topology source's first read (`None`:
    /// topology off), so that the group forms knowing this node's place.
    pub topology_wait: Option<Duration>,
}

/// Why the configuration does not give usable probing settings.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// `collective.rank = -1` and no single peer is on this host.
    #[error("collective.rank is -1 and {0} peers match a local address; set collective.rank")]
    RankNotFound(usize),
    /// `collective.rank` names no peer.
    #[error("collective.rank {0} is outside collective.peers")]
    RankOutside(usize),
    /// This node's topology label has no other member.
    #[error("this node ({0}) is alone in its probe group; give its topology label more members")]
    Alone(String),
    /// No key file.
    #[error("collective.key_file is required")]
    NoKey,
    /// The key file cannot be used.
    #[error("collective.key_file {}: {source}", path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        source: crate::config::file::SecretError,
    },
}

/// FNV-1a over `bytes`: a stable group id every member derives from the same text.
fn fnv1a(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// This node's rank in `peers`: `collective.rank`, or the one peer on a local address.
fn own_rank(config: &Config, peers: &[SocketAddr]) -> Result<usize, SettingsError> {
    let c = &config.collective;
    let rank = if let RankSpec::Fixed(rank) = c.rank {
        usize::from(rank)
    } else {
        let local: Vec<std::net::IpAddr> = crate::collective::bootstrap::env::interfaces()
            .into_iter()
            .map(|i| i.addr)
            .collect();
        let mine: Vec<usize> = (0..peers.len())
            .filter(|i| local.contains(&peers[*i].ip()))
            .collect();
        match mine.as_slice() {
            [one] => *one,
            _ => return Err(SettingsError::RankNotFound(mine.len())),
        }
    };
    if rank >= peers.len() {
        return Err(SettingsError::RankOutside(rank));
    }
    Ok(rank)
}

/// Members from `collective.peers` (or the rank table), cut to this node's probe group:
/// the source, the listen address, and the group's base communicator id.
fn static_members(config: &Config) -> Result<(Source, SocketAddr, u64), SettingsError> {
    let c = &config.collective;
    let peers = c.peer_addrs();
    let rank = own_rank(config, &peers)?;
    // This node's probe group: the members sharing its topology label, split into
    // balanced groups of at most probe.max_group_size.
    let group = membership::probe_group(
        &c.peer_topology,
        rank,
        peers.len(),
        config.probe.max_group_size as usize,
    );
    if group.len() < 2 {
        return Err(SettingsError::Alone(c.peers[rank].to_string()));
    }
    let name = |i: usize| match c.peer_names.get(i) {
        Some(n) => n.clone(),
        None => c.peers[i].to_string(),
    };
    let names: Vec<String> = group.iter().map(|&i| name(i)).collect();
    let comm_id = fnv1a(group.iter().flat_map(|&i| c.peers[i].as_str().bytes()));
    let peers: Vec<SocketAddr> = group.iter().map(|&i| peers[i]).collect();
    let rank = group.iter().position(|&i| i == rank).unwrap_or(0);
    let listen = peers[rank];
    Ok((Source::Static { peers, names, rank }, listen, comm_id))
}

/// Members from `collective.peers_dns`.
fn dns_members(config: &Config, dns: &DnsTarget) -> (Source, SocketAddr, u64) {
    let c = &config.collective;
    let port = dns.port();
    let own = c.own_address.as_ref().map(PeerAddr::addr);
    let listen = own.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], port)));
    let source = Source::Dns {
        host: dns.host().to_string(),
        port,
        own,
        refresh: config.probe.dns_refresh,
        stale_after: config.probe.membership_stale_after,
        max_group_size: config.probe.max_group_size as usize,
    };
    (source, listen, fnv1a(dns.as_str().bytes()))
}

/// The shared key: the file's one token, surrounding whitespace trimmed, at least 16
/// bytes, read as every secret is (a regular file, bounded, with a deadline).
fn read_key(config: &Config) -> Result<Vec<u8>, SettingsError> {
    let path = config
        .collective
        .key_file
        .as_ref()
        .ok_or(SettingsError::NoKey)?;
    let secret = crate::config::file::read_key(path).map_err(|source| SettingsError::Key {
        path: path.clone(),
        source,
    })?;
    if secret.world_readable {
        tracing::warn!(path = %path.display(), "collective.key_file is readable by every user; make it 0600 or 0400");
    }
    Ok(secret.bytes)
}

impl ProbeSettings {
    /// The communicator settings for a group of `members` (candidate indices) in which this
    /// member is `rank`, with id `comm_id`: the test-only faults injected towards each peer
    /// (a peer's own spec before the general one), and in certificate mode this node's
    /// identity, read from its files now (a rotated certificate counts from this formation
    /// on), with what each member's certificate must be valid for: its name, or its probe
    /// address when it is known by address.
    pub(super) fn group_config(
        &self,
        candidates: &[Candidate],
        comm_id: u64,
        members: &[usize],
        rank: usize,
    ) -> Result<CommConfig, IdentityFileError> {
        let mut cfg = self.comm.clone();
        cfg.transport.comm_id = comm_id;
        for p in (0..members.len()).filter(|p| *p != rank) {
            let addr = candidates[members[p]].addr;
            let own = self.inject_peers.iter().find(|(a, _)| *a == addr);
            if let Some(spec) = own.map(|(_, f)| f).or(self.inject.as_ref()) {
                cfg.transport.faults.insert(p, spec.clone());
            }
        }
        let victim = self
            .inject_forge_relayed
            .and_then(|a| (0..members.len()).find(|p| candidates[members[*p]].addr == a));
        cfg.relay_fault = victim.map(super::forgeries::forging_relay);
        if let Some(files) = &self.identity {
            let subjects = members.iter().map(|m| subject(&candidates[*m])).collect();
            cfg.identity = Some(MemberIdentity {
                identity: Arc::new(files.load()?),
                subjects,
            });
        }
        Ok(cfg)
    }
}

/// What a member's certificate must be valid for: the name it is known by, or its probe
/// address when that name is only its address.
fn subject(c: &Candidate) -> Subject {
    let by_address = c.name.parse::<std::net::SocketAddr>().is_ok()
        || c.name.parse::<std::net::IpAddr>().is_ok();
    if by_address {
        Subject::Ip(c.addr.ip())
    } else {
        Subject::Name(c.name.clone())
    }
}

/// The engine's transport and timeouts for a group with base id `base_id`.
fn comm_config(config: &Config, base_id: u64, key: Vec<u8>) -> CommConfig {
    let c = &config.collective;
    let mut t = TransportConfig::new(base_id, key);
    t.channels = c.channels as usize;
    t.connect_timeout = c
        .connect_timeout
        .min((config.probe.interval * 2).max(Duration::from_secs(2)));
    t.traffic_class = c.traffic_class.map(TrafficClass::tos);
    t.bind_device = c.bind_device.clone();
    t.authenticate_payloads = c.authenticate_payloads;
    let mut comm = CommConfig::new(t);
    comm.exec_timeout = c.exec_timeout;
    if let Some(algo) = &c.algo {
        comm.algo = algo.plan().clone();
    }
    comm
}

/// The name this node announces: `collective.node_name`, `NODE_NAME`, else the host name.
fn own_name(config: &Config) -> String {
    [
        config.collective.node_name.clone(),
        std::env::var("NODE_NAME").unwrap_or_default(),
    ]
    .into_iter()
    .find(|n| !n.is_empty())
    .or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
    })
    .unwrap_or_default()
}

fn throttle(rate: u64) -> FaultSpec {
    FaultSpec {
        rate_bytes_per_sec: Some(rate as f64),
        ..FaultSpec::default()
    }
}

/// The shipped `probe.interval` (the configuration's default; the simulator, which sits
/// below the configuration, has the same value as `health::plan::SHIPPED_PROBE_INTERVAL`).
pub fn default_probe_interval() -> Duration {
    Config::default().probe.interval
}

pub use crate::health::plan::device_every;

/// The uplink congestion reader's settings from `[probe]`.
pub fn congestion_settings(p: &ProbeSection) -> CongestionSettings {
    CongestionSettings {
        enabled: p.congestion_enabled,
        interface: p.congestion_interface.clone(),
        busy_ratio: p.congestion_busy_ratio,
        line_rate: p.congestion_line_rate,
        ce_packets: p.congestion_ce_packets,
        sysfs_root: p.congestion_sysfs_root.clone(),
        procfs_root: p.congestion_procfs_root.clone(),
        // Three rounds: longer, and probing was paused in between.
        ce_max_gap: p.interval * 3,
    }
}

/// The health engine's thresholds from `[health]`.
pub fn health_config(h: &HealthSection) -> HealthConfig {
    HealthConfig {
        window: h.window as usize,
        delta: h.delta,
        z: h.z,
        mad_floor: h.mad_floor,
        confirm_peers: h.confirm_peers as usize,
        hard_hold_down: h.hard_hold_down as usize,
        confirm_rounds: h.confirm_rounds as usize,
        confirm_hold: h.confirm_hold as usize,
        congested_hold: h.congested_hold as usize,
        uncorroborated_hold: h.uncorroborated_hold as usize,
        exit_rounds: h.exit_rounds as usize,
        probation_rounds: h.probation_rounds as usize,
        fabric_ratio: h.fabric_ratio,
        fabric_rounds: h.fabric_rounds as usize,
        link_observations: h.link_observations as usize,
        new_normal_rounds: h.new_normal_rounds as usize,
        tor_aware: h.tor_aware,
    }
}

/// What this node's NPU ports are, for the device plane: their addresses (read when the
/// group forms) and their counters (read each round).
pub struct LocalPorts {
    /// Physical id and device IP of each port.
    pub addresses: Arc<dyn Fn() -> Vec<(u32, Ipv4Addr)> + Send + Sync>,
    /// Physical id and counters of each port, as the port poller last read them.
    pub status: Arc<dyn Fn() -> Vec<(u32, super::device::status::PortReading)> + Send + Sync>,
}

/// Device-plane settings from `[device_probe]`, with the pinger and the sources of this
/// node's ports the composition root supplies. The pings per round are cut to the packet
/// budget at the device plane's own interval (every [`device_every`] probe rounds).
pub fn device_settings(
    config: &Config,
    pinger: Arc<dyn Pinger>,
    local: LocalPorts,
) -> DeviceSettings {
    let d = &config.device_probe;
    let every = device_every(d.interval, config.probe.interval);
    let interval = config.probe.interval.as_secs_f64() * every as f64;
    let pings = super::device::plan::pings_within_budget(
        d.pings_per_round as usize,
        d.max_packets_per_second,
        interval,
    );
    if pings < d.pings_per_round as usize {
        tracing::warn!(
            wanted = d.pings_per_round,
            kept = pings,
            budget = d.max_packets_per_second,
            "device_probe.pings_per_round cut to the packet budget at device_probe.interval"
        );
    }
    DeviceSettings {
        pings_per_round: pings,
        confirm_cap: d.confirm_cap as usize,
        // A round's pings have most of the interval; the rest is the margin for the round
        // that collects them.
        collect_deadline: config.probe.interval.mul_f64(0.8),
        engine: DeviceConfig::default(),
        pinger,
        local_ports: local.addresses,
        local_status: local.status,
        hccs: None,
        rails: config.topology.npu_cabling == crate::config::NpuCabling::Rail,
    }
}

/// HCCS ping-mesh settings from `[device_probe]`, with the driver and the source of this
/// node's vNIC addresses the composition root supplies; `None` when `device_probe.hccs` is
/// off.
pub fn hccs_settings(
    config: &Config,
    driver: Box<dyn super::device::hccs::MeshDriver>,
    local_vnics: Arc<dyn Fn() -> Vec<(u32, Ipv4Addr)> + Send + Sync>,
) -> Option<super::device::hccs::HccsSettings> {
    let d = &config.device_probe;
    if !d.hccs {
        tracing::info!("HCCS ping mesh off: device_probe.hccs = false");
        return None;
    }
    Some(super::device::hccs::HccsSettings {
        driver: Arc::new(std::sync::Mutex::new(driver)),
        // Validated whole seconds in 1..=60.
        round_interval_secs: d.hccs_round_interval.as_secs().clamp(1, 60) as u32,
        read_interval: d.hccs_read_interval,
        super_pod: d.hccs_super_pod,
        local_vnics,
    })
}

impl ProbeSettings {
    /// Probing settings from the configuration, or why they are unusable. Reads the key
    /// file.
    pub fn from_config(config: &Config) -> Result<Self, SettingsError> {
        let (source, listen, base_id) = match &config.collective.peers_dns {
            None => static_members(config)?,
            Some(dns) => dns_members(config, dns),
        };
        let comm = comm_config(config, base_id, read_key(config)?);
        let p = &config.probe;
        let inject_peers = p
            .inject_peer_throttle
            .iter()
            .map(|t| (t.addr(), throttle(t.rate())))
            .collect();
        Ok(ProbeSettings {
            source,
            listen,
            member_timeout: p.member_timeout,
            own_name: own_name(config),
            inject_peers,
            inject: (p.inject_throttle_bytes_per_second > 0)
                .then(|| throttle(p.inject_throttle_bytes_per_second)),
            comm,
            interval: p.interval,
            device_every: device_every(config.device_probe.interval, p.interval),
            small_bytes: p.small_bytes as usize,
            link_bytes: p.link_bytes as usize,
            ring_every: p.ring_every,
            ring_bytes: p.ring_bytes as usize,
            budget_bytes_per_hour: p.budget_bytes_per_hour,
            budget_busy_ratio: p.budget_busy_ratio,
            health: health_config(&config.health),
            inject_lies: p.inject_lies,
            inject_oversize_handover: p.inject_oversize_handover,
            inject_forge_relayed: p.inject_forge_relayed.as_ref().map(|a| a.addr()),
            min_wire_version: u8::try_from(config.collective.min_wire_version).unwrap_or(u8::MAX),
            identity: config.collective.identity_files(),
            exclusion: p.exclusion,
            inject_signs: Signs::from_labels(&p.inject_hardware_signs),
            hard_faults: super::hard_faults::HardFaultRules {
                consecutive_reads: config.health.hard_consecutive_reads,
                ecc_double_per_window: u64::from(config.health.hard_ecc_double_per_hour),
                npu_scoped: config.health.hard_npu_scoped,
            },
            device: None,
            congestion: congestion_settings(p),
            // A first topology read is normally a file read, the API client's configuration,
            // a node read and a page or two of HyperNodes, each within the deadline; one
            // slower than that (many pages, a failing API) lets probing start without it.
            topology_wait: config
                .topology
                .enabled
                .then(|| config.topology.deadline * 5),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration's shipped `[health]` defaults are the engine's defaults (both are
    /// written down, in `config` and in `health`, which know nothing of each other).
    #[test]
    fn shipped_health_defaults_agree_with_the_engines() {
        assert_eq!(
            health_config(&Config::default().health),
            HealthConfig::default()
        );
    }

    /// The sign names the configuration accepts are the labels the snapshot exports
    /// (written down twice: `config` knows nothing of `snapshot`).
    #[test]
    fn the_configuration_knows_the_exported_sign_names() {
        assert_eq!(
            crate::config::HARDWARE_SIGN_NAMES,
            crate::snapshot::probe::HARDWARE_SIGNS
        );
        let names = ["pcie".to_string(), "link_speed".to_string()];
        assert_eq!(
            Signs::from_labels(&names),
            Signs::PCIE.union(Signs::LINK_SPEED)
        );
    }

    /// The reader's own defaults are the configuration's shipped ones.
    #[test]
    fn shipped_congestion_defaults_agree_with_the_readers() {
        assert_eq!(
            congestion_settings(&Config::default().probe),
            CongestionSettings::default()
        );
    }

    #[test]
    fn congestion_keys_map_field_by_field() {
        let cfg = crate::config::load_str(
            "[probe]\ncongestion_enabled = false\ncongestion_interface = \"bond0\"\ncongestion_busy_ratio = 0.25\ncongestion_line_rate = 100000000000\ncongestion_ce_packets = 7\ncongestion_sysfs_root = \"/x/sys\"\ncongestion_procfs_root = \"/x/proc\"\n",
            None,
            &[],
        )
        .unwrap();
        let c = congestion_settings(&cfg.probe);
        assert_eq!(
            c,
            CongestionSettings {
                enabled: false,
                interface: "bond0".into(),
                busy_ratio: 0.25,
                line_rate: 100_000_000_000,
                ce_packets: 7,
                sysfs_root: "/x/sys".into(),
                procfs_root: "/x/proc".into(),
                // Three of the shipped 10 s rounds.
                ce_max_gap: Duration::from_secs(30),
            }
        );
    }

    #[test]
    fn a_busy_ratio_below_its_range_is_refused() {
        let err = crate::config::load_str("[probe]\ncongestion_busy_ratio = 0.01\n", None, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("probe.congestion_busy_ratio"), "{err}");
    }

    /// The shipped cadence the simulator runs at (`health::plan`, which sits below the
    /// configuration and cannot read it) is the configuration's default.
    #[test]
    fn the_shipped_cadence_is_the_configurations_default() {
        use crate::health::plan::{SHIPPED_DEVICE_INTERVAL, SHIPPED_PROBE_INTERVAL};
        let shipped = Config::default();
        assert_eq!(shipped.probe.interval, SHIPPED_PROBE_INTERVAL);
        assert_eq!(shipped.device_probe.interval, SHIPPED_DEVICE_INTERVAL);
        assert_eq!(default_probe_interval(), SHIPPED_PROBE_INTERVAL);
    }

    /// `topology.npu_cabling` reaches the device plane: `rail` turns rails on, the default
    /// and `tor` leave them off, and a misspelling is refused naming the key.
    #[test]
    fn npu_cabling_reaches_the_device_settings() {
        let settings = |text: &str| {
            let cfg = crate::config::load_str(text, None, &[]).unwrap();
            let local = LocalPorts {
                addresses: Arc::new(Vec::new),
                status: Arc::new(Vec::new),
            };
            device_settings(&cfg, Arc::new(super::super::device::NoPinger), local)
        };
        assert!(!settings("").rails);
        assert!(!settings("[topology]\nnpu_cabling = \"tor\"\n").rails);
        assert!(settings("[topology]\nnpu_cabling = \"rail\"\n").rails);
        let err = crate::config::load_str("[topology]\nnpu_cabling = \"rails\"\n", None, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("topology.npu_cabling"), "{err}");
    }

    #[test]
    fn health_section_maps_field_by_field() {
        let cfg = crate::config::load_str("[health]\nwindow = 20\ndelta = 0.1\nz = 4\n", None, &[])
            .unwrap();
        let e = health_config(&cfg.health);
        assert_eq!((e.window, e.delta, e.z), (20, 0.1, 4.0));
    }
}
