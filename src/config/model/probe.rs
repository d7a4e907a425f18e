//! `[probe]`: the probe rounds between the members, their budget, this node's uplink
//! congestion reader, and the fault-injection keys for tests and the demo.

use std::path::PathBuf;
use std::time::Duration;

use super::section;
use crate::config::duration;
use crate::config::schema::{Spec, ms, secs};
use crate::config::types::{PeerAddr, PeerThrottle, parse, unset};

/// The hardware signs `probe.inject_hardware_signs` may name (the labels of
/// `hcclwatch_probe_uplink_hardware_sign`).
pub const HARDWARE_SIGN_NAMES: [&str; 3] = ["link_speed", "pcie", "frame_errors"];

section! {
    /// `[probe]`: continuous probing rounds.
    pub struct ProbeSection in "probe" {
        /// Run probe rounds with the `[collective]` peers.
        enabled: bool = false, Spec::BOOL;
        /// Time between round starts.
        #[serde(with = "duration::serde_str")]
        interval: Duration = secs(10), Spec::duration(ms(100), ms(3_600_000));
        /// Bytes of the latency all-reduce.
        small_bytes: u64 = 8192, Spec::int(4, 1 << 20);
        /// Bytes of each permutation / confirmation exchange.
        link_bytes: u64 = 1 << 20, Spec::int(1, 1 << 30);
        /// A ring all-reduce every this many rounds (0: never).
        ring_every: u64 = 10, Spec::int(0, 100_000);
        /// Bytes of the ring all-reduce.
        ring_bytes: u64 = 4 << 20, Spec::int(4, 1 << 30);
        /// A member that has not accepted a connection for this long is left out of the
        /// group (the others go on probing) until it accepts again.
        #[serde(with = "duration::serde_str")]
        member_timeout: Duration = secs(90), Spec::duration(ms(1000), ms(86_400_000));
        /// How long a member that broke the group's engine-state hand-over (every member
        /// saw the same failure from it) is left out of the group.
        #[serde(with = "duration::serde_str")]
        exclusion: Duration = secs(600), Spec::duration(ms(1000), ms(86_400_000));
        /// How often `collective.peers_dns` is resolved again.
        #[serde(with = "duration::serde_str")]
        dns_refresh: Duration = secs(30), Spec::duration(ms(1000), ms(86_400_000));
        /// A DNS member list not refreshed for this long is stale: probing stops (fail
        /// closed).
        #[serde(with = "duration::serde_str")]
        membership_stale_after: Duration = secs(300), Spec::duration(ms(1000), ms(86_400_000));
        /// Members per probe group at most; a bigger fleet (or topology label) is split into
        /// balanced groups, since a pair recurs in the permutation only once per n − 1
        /// rounds.
        max_group_size: u64 = 64, Spec::int(2, 1024);
        /// Fraction of wall time this node may spend in probe rounds over the last hour (0:
        /// unlimited); over it, the group runs reduced rounds as for the byte budget.
        budget_busy_ratio: f64 = 0.01, Spec::float(0.0, 1.0);
        /// Probe bytes this node may send per hour (0: unlimited).
        budget_bytes_per_hour: u64 = 1 << 30, Spec::int(0, i64::MAX);
        /// Fault injection for tests and the demo: cap this node's probe sends to one peer,
        /// as `"IP:PORT=BYTES_PER_SECOND"` (that peer's probe address); overrides
        /// `inject_throttle_bytes_per_second` for it. Set on both ends, it is a slow link.
        inject_peer_throttle: Vec<PeerThrottle> = Vec::new(),
            Spec::STR_LIST.parsed(parse::peer_throttles).for_tests();
        /// Fault injection for tests and the demo: cap this node's probe sends (0: off).
        inject_throttle_bytes_per_second: u64 = 0, Spec::int(0, i64::MAX).for_tests();
        /// Fault injection for tests only: this member lies in everything it reports to its
        /// group (plans, timings, engine state), to show that one member cannot cause a
        /// quarantine.
        inject_lies: bool = false, Spec::BOOL.for_tests();
        /// Fault injection for tests only: when this member sends the group's engine state
        /// at formation, it announces more bytes than any state can hold.
        inject_oversize_handover: bool = false, Spec::BOOL.for_tests();
        /// Fault injection for tests only: this member rewrites the probe rows of the member
        /// at this probe address (`IP:port`) as it relays them, claiming a hard fault and
        /// 10 s timings for it, to show that signed rows stop a forging relay. Empty: off.
        #[serde(with = "unset::empty")]
        inject_forge_relayed: Option<PeerAddr> = None,
            Spec::STR.parsed(parse::optional_text::<PeerAddr>).for_tests();
        /// Fault injection for tests and the demo: this node reports these hardware signs
        /// every round (`link_speed`, `pcie`, `frame_errors`), as a slow component's
        /// interface would show them, besides whatever its uplink shows.
        inject_hardware_signs: Vec<String> = Vec::new(), Spec::STR_LIST.for_tests();
        /// Read this node's own uplink congestion each round and report it to the group.
        congestion_enabled: bool = true, Spec::BOOL;
        /// The interface whose byte counters are read; empty: the one that holds the local
        /// address the probes use.
        congestion_interface: String = String::new(), Spec::STR;
        /// Other traffic at or above this fraction of the line rate, in either direction,
        /// makes the round congested.
        congestion_busy_ratio: f64 = 0.5, Spec::float(0.05, 1.0);
        /// The uplink's line rate in bits per second; 0 reads it from sysfs (`speed`).
        congestion_line_rate: u64 = 0, Spec::int(0, i64::MAX);
        /// Congestion-marked packets (`IpExt: InCEPkts`) since the last round at or above
        /// this make the round congested (0: this signal off).
        congestion_ce_packets: u64 = 100, Spec::int(0, i64::MAX);
        /// For tests: where sysfs is (`class/net/<if>/...` is read below it).
        congestion_sysfs_root: PathBuf = "/sys".into(), Spec::PATH.for_tests();
        /// For tests: where procfs is (`net/netstat` is read below it).
        congestion_procfs_root: PathBuf = "/proc".into(), Spec::PATH.for_tests();
    }
}
