//! `[collective]`: who the members are (a static list, a DNS name or an HCCL rank table)
//! and the engine's transport settings.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::section;
use crate::config::duration;
use crate::config::schema::{Spec, ms, secs};
use crate::config::types::{DnsTarget, HcclAlgo, PeerAddr, RankSpec, TrafficClass, parse, unset};
use crate::config::{Problem, file};

section! {
    /// `[collective]`: a static peer list and the engine's transport settings.
    pub struct CollectiveConfig in "collective" {
        /// Listen address of every member, in rank order.
        peers: Vec<PeerAddr> = Vec::new(), Spec::ADDR_LIST;
        /// Names for the members in metric labels and logs (same order as `peers`), e.g.
        /// the Kubernetes node names, so probe series and device series name a node the
        /// same way. Empty: the addresses.
        peer_names: Vec<String> = Vec::new(), Spec::NAME_LIST;
        /// A topology label per member (same order as `peers`), e.g. the rack or superpod:
        /// members probe only within their label, in groups of at most
        /// `probe.max_group_size`. Empty: one label for all.
        peer_topology: Vec<String> = Vec::new(), Spec::STR_LIST;
        /// This node's rank in `peers`; `-1` in the file finds it by matching a local
        /// address.
        rank: RankSpec = RankSpec::Auto, Spec::int(-1, 65535);
        /// `host:port` of a DNS name resolving to every member (e.g. a Kubernetes headless
        /// Service), instead of `peers`; re-resolved every `probe.dns_refresh`.
        #[serde(with = "unset::empty")]
        peers_dns: Option<DnsTarget> = None,
            Spec::STR.parsed(parse::optional_text::<DnsTarget>);
        /// With `peers_dns`: this node's own `IP:port` among the resolved addresses. Unset:
        /// the resolved address on one of this host's interfaces.
        #[serde(with = "unset::empty")]
        own_address: Option<PeerAddr> = None,
            Spec::STR.parsed(parse::optional_text::<PeerAddr>);
        /// With `peers_dns`: the name this node announces to the group for metric labels.
        /// Empty: the `NODE_NAME` environment variable, else the host name.
        node_name: String = String::new(), Spec::STR;
        /// File holding the shared authentication key (at least 16 bytes).
        #[serde(skip_serializing_if = "Option::is_none")]
        key_file: Option<PathBuf> = None, Spec::PATH;
        /// Certificate mode: this node's certificate chain (PEM, leaf first), issued by the
        /// cluster CA for its node name (`peer_names`) or its probe address. Set with
        /// `identity_key_file` and `identity_ca_file`; re-read at every group formation.
        #[serde(skip_serializing_if = "Option::is_none")]
        identity_cert_file: Option<PathBuf> = None, Spec::PATH;
        /// Certificate mode: the certificate's private key (PEM).
        #[serde(skip_serializing_if = "Option::is_none")]
        identity_key_file: Option<PathBuf> = None, Spec::PATH;
        /// Certificate mode: the cluster CA's certificates (PEM) every member's certificate
        /// must chain to.
        #[serde(skip_serializing_if = "Option::is_none")]
        identity_ca_file: Option<PathBuf> = None, Spec::PATH;
        /// An HCCL rank table (`RANK_TABLE_FILE`) to take the members from instead of
        /// `peers`: one member per server, in order of first appearance.
        #[serde(skip_serializing_if = "Option::is_none")]
        rank_table_file: Option<PathBuf> = None, Spec::PATH;
        /// Port every member listens on when members come from the rank table.
        rank_table_port: u16 = 60_100, Spec::int(1, 65535);
        /// Connections per peer.
        channels: u32 = crate::collective::transport::default_channels() as u32,
            Spec::int(1, 16);
        /// Bound on connection setup (like `HCCL_CONNECT_TIMEOUT`).
        #[serde(with = "duration::serde_str")]
        connect_timeout: Duration = secs(120), Spec::duration(ms(1000), ms(7_200_000));
        /// Bound on every operation (like `HCCL_EXEC_TIMEOUT`).
        #[serde(with = "duration::serde_str")]
        exec_timeout: Duration = secs(60), Spec::duration(ms(100), ms(86_400_000));
        /// `HCCL_ALGO` syntax; unset selects by α-β cost.
        #[serde(with = "unset::empty")]
        algo: Option<HcclAlgo> = None, Spec::STR.parsed(parse::optional_text::<HcclAlgo>);
        /// The lowest wire version the probe group may speak (2 to 4). At 4 a member of a
        /// release before signed rows makes the group refuse to form, naming it, instead of
        /// the whole group speaking a version whose rows anyone with the key can forge.
        /// Raise it once every member runs a release that speaks 4 (`docs/upgrades.md`).
        min_wire_version: u64 = 2, Spec::int(2, 4);
        /// Bind outgoing connections to this interface (`SO_BINDTODEVICE`, needs root).
        #[serde(skip_serializing_if = "Option::is_none")]
        bind_device: Option<String> = None, Spec::STR;
        /// Also MAC the probes' measurement payloads (control frames always are). The
        /// daemon's payloads are small, so this is on; `hcclwatch bench` leaves it off.
        authenticate_payloads: bool = true, Spec::BOOL;
        /// `HCCL_RDMA_TC`-style traffic class (DSCP × 4) for the IP TOS byte; unset (`-1`
        /// in the file) leaves it.
        #[serde(with = "unset::minus_one")]
        traffic_class: Option<TrafficClass> = None,
            Spec::int(-1, 255).parsed(parse::traffic_class);
    }
}

impl CollectiveConfig {
    /// The identity files (certificate mode) when all three are set; None otherwise
    /// (`check-config` refuses one or two of them).
    pub fn identity_files(&self) -> Option<crate::config::identity::IdentityFiles> {
        Some(crate::config::identity::IdentityFiles {
            cert: self.identity_cert_file.clone()?,
            key: self.identity_key_file.clone()?,
            ca: self.identity_ca_file.clone()?,
        })
    }

    /// Fills `peers` from `rank_table_file`, if one is set. The daemon is per node, so the
    /// members are the table's hosts, not its device ranks: each host's address is its
    /// first rank's `host_ip` (else `device_ip`) on `rank_table_port`.
    pub fn resolve_rank_table(&mut self) -> Result<(), Problem> {
        let Some(path) = &self.rank_table_file else {
            return Ok(());
        };
        let problem = |reason: String| Problem::key("collective.rank_table_file", reason);
        if !self.peers.is_empty() {
            return Err(problem(
                "set either collective.peers or collective.rank_table_file, not both".into(),
            ));
        }
        let text = file::read_text(path, file::RANK_TABLE_LIMIT)
            .map_err(|e| problem(format!("cannot read rank table: {e}")))?;
        let table = crate::collective::bootstrap::ranktable::parse(&text)
            .map_err(|e| problem(format!("{}: {e}", path.display())))?;
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
                problem(format!(
                    "{}: server {:?} (rank {}) has neither host_ip nor device_ip",
                    path.display(),
                    r.server_id,
                    r.rank_id
                ))
            })?;
            servers.insert(id);
            self.peers
                .push(PeerAddr::from(SocketAddr::new(ip, self.rank_table_port)));
        }
        Ok(())
    }

    /// The members' addresses, in rank order.
    pub fn peer_addrs(&self) -> Vec<SocketAddr> {
        self.peers.iter().map(PeerAddr::addr).collect()
    }
}
