//! HCCS ping mesh through DCMI (Atlas A3 only): a resident task on one NPU that pings up
//! to 48 destinations (other NPUs' 192.x vNIC addresses) every round and keeps per-
//! destination statistics, read with [`PingMesh::info`].
//!
//! The four functions (`dcmi_start_hccsping_mesh`, `dcmi_get_hccsping_mesh_info` — or its
//! `_v2` where the library has it —, `dcmi_get_hccsping_mesh_state`,
//! `dcmi_stop_hccsping_mesh`) refuse with `-8255` on anything but A3 and with `-8002` when
//! the caller is not root (or not in a privileged container); older drivers lack the
//! symbols. All of these are [`MeshError::NotAvailable`] / [`MeshError::NotPermitted`]: the
//! caller should stop asking on that node.
//!
//! A [`PingMesh`] has its own call thread with the same deadline rules as the telemetry
//! calls ([`super::runner`]), so the device prober can drive it from its own thread while
//! the poller reads telemetry.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use super::codes;
use super::ffi::{self, DcmiLib, MeshDestRaw, MeshOperate, Raw};
use super::runner::Runner;
use crate::snapshot::npu::ChipAddress;

/// Seconds per unit of `max_time`, `min_time`, `avg_time` and `tp95_time`.
///
/// **NOT CONFIRMED.** The DCMI reference gives no unit. The related single-shot path
/// (`hccn_tool -hccs_ping`) keeps its times in ns and prints µs, and MindCluster's fault
/// analysis divides the average by 1000 before comparing it with thresholds; both point at
/// µs (or ns) but neither proves it. Every conversion goes through this one constant so a
/// check on hardware changes one line; until then, compare these times with each other
/// (one destination against another, a path against its own history), not with absolute
/// thresholds.
pub const MESH_TIME_UNIT_SECONDS: f64 = 1e-6;

/// Destinations per task (`HCCS_PING_MESH_MAX_NUM`).
pub const MAX_DESTINATIONS: usize = ffi::MESH_MAX_DESTINATIONS;

/// The first octet of every vNIC address libdcmi accepts (`VNIC_IP_HEADER`).
const VNIC_FIRST_OCTET: u8 = 192;

/// A ping-mesh task's parameters, with the ranges libdcmi enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshTask {
    /// Destinations: 192.x.x.x vNIC addresses, 1 to 48 distinct.
    pub destinations: Vec<Ipv4Addr>,
    /// Bytes per packet, 1792..=3000.
    pub packet_size: u32,
    /// Packets per destination and round, 1..=1000.
    pub packets_per_round: u32,
    /// Between packets, ms, 0..=1000.
    pub packet_interval_ms: u32,
    /// Between rounds, s, 1..=60.
    pub round_interval_secs: u32,
    /// Task slot, 0 or 1 (MindCluster uses 0 for destinations in the node, 1 outside).
    pub task_id: u32,
}

impl MeshTask {
    /// A task to `destinations` with MindCluster NodeD's parameters (1792-byte packets, 10
    /// per round, 10 ms apart) and rounds every `round_interval_secs`, in slot 0.
    pub fn new(destinations: Vec<Ipv4Addr>, round_interval_secs: u32) -> Self {
        Self {
            destinations,
            packet_size: 1792,
            packets_per_round: 10,
            packet_interval_ms: 10,
            round_interval_secs,
            task_id: 0,
        }
    }

    /// Checks every parameter against libdcmi's limits, so a bad task is refused here
    /// with the reason rather than by the library with `-8001`.
    pub fn validate(&self) -> Result<(), MeshError> {
        let unique: BTreeSet<Ipv4Addr> = self.destinations.iter().copied().collect();
        let bad = |what: String| Err(MeshError::InvalidTask(what));
        if unique.is_empty() || unique.len() > MAX_DESTINATIONS {
            return bad(format!(
                "{} distinct destinations; 1 to {MAX_DESTINATIONS} allowed",
                unique.len()
            ));
        }
        if let Some(a) = unique.iter().find(|a| a.octets()[0] != VNIC_FIRST_OCTET) {
            return bad(format!("{a} is not a 192.x.x.x vNIC address"));
        }
        for (name, v, lo, hi) in [
            ("packet_size", self.packet_size, 1792, 3000),
            ("packets_per_round", self.packets_per_round, 1, 1000),
            ("packet_interval_ms", self.packet_interval_ms, 0, 1000),
            ("round_interval_secs", self.round_interval_secs, 1, 60),
            ("task_id", self.task_id, 0, 1),
        ] {
            if !(lo..=hi).contains(&v) {
                return bad(format!("{name} {v} is outside {lo}..={hi}"));
            }
        }
        Ok(())
    }

    /// How long after the start the first statistics exist: one round interval plus the
    /// round's packets (the reference's advice for the first read).
    pub fn first_result_after(&self) -> Duration {
        Duration::from_secs(u64::from(self.round_interval_secs))
            + Duration::from_millis(
                u64::from(self.packets_per_round) * u64::from(self.packet_interval_ms),
            )
    }

    /// The C struct's values: the distinct destinations in order, comma-separated.
    fn operate(&self) -> MeshOperate {
        let mut seen = BTreeSet::new();
        let list: Vec<String> = self
            .destinations
            .iter()
            .filter(|a| seen.insert(**a))
            .map(Ipv4Addr::to_string)
            .collect();
        // Every value was range-checked by `validate`, so the casts cannot wrap.
        MeshOperate {
            dst_addr_list: list.join(","),
            pkt_size: self.packet_size as i32,
            pkt_send_num: self.packets_per_round as i32,
            pkt_interval: self.packet_interval_ms as i32,
            timeout: 0,
            task_interval: self.round_interval_secs as i32,
            task_id: self.task_id as i32,
        }
    }
}

/// `dcmi_get_hccsping_mesh_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeshState {
    /// 0: not running (never started, stopped, or lost in a chip reset: start it again).
    Stopped,
    /// 1: running.
    Running,
    /// Any other value.
    Unknown(u32),
}

impl MeshState {
    fn from_raw(v: u32) -> Self {
        match v {
            0 => MeshState::Stopped,
            1 => MeshState::Running,
            other => MeshState::Unknown(other),
        }
    }
}

/// One destination's statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshDestination {
    /// The destination as the library reports it.
    pub address: String,
    /// Packets answered.
    pub replies: u32,
    /// Packets lost.
    pub losses: u32,
    /// Round-trip times, seconds ([`MESH_TIME_UNIT_SECONDS`]); `None` when the library
    /// reports -1 (not pinged yet) or another negative value.
    pub max_seconds: Option<f64>,
    /// Fastest.
    pub min_seconds: Option<f64>,
    /// Average.
    pub avg_seconds: Option<f64>,
    /// 95th percentile.
    pub p95_seconds: Option<f64>,
    /// Rounds the statistics cover.
    pub rounds_in_stats: u32,
    /// Rounds since the task started.
    pub rounds_total: u64,
    /// The faulty-L1-plane summary (`_v2` libraries only).
    pub l1_plane_faults: Option<u8>,
}

impl MeshDestination {
    /// Losses over packets sent, when any were sent.
    pub fn loss_ratio(&self) -> Option<f64> {
        let sent = u64::from(self.replies) + u64::from(self.losses);
        (sent > 0).then(|| self.losses as f64 / sent as f64)
    }

    fn from_raw(r: MeshDestRaw) -> Self {
        let secs = |t: i64| (t >= 0).then_some(t as f64 * MESH_TIME_UNIT_SECONDS);
        Self {
            address: r.addr,
            replies: r.suc_pkt_num,
            losses: r.fail_pkt_num,
            max_seconds: secs(r.max_time),
            min_seconds: secs(r.min_time),
            avg_seconds: secs(r.avg_time),
            p95_seconds: secs(r.tp95_time),
            rounds_in_stats: u32::try_from(r.reply_stat_num).unwrap_or(0),
            rounds_total: r.ping_total_num,
            l1_plane_faults: r.l1_plane_check_res,
        }
    }
}

/// Why a ping-mesh call gave nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeshError {
    /// The library lacks the function, or the chip refuses it (`-8255`: not an A3).
    #[error("HCCS ping mesh is not available on this NPU or driver")]
    NotAvailable,
    /// `-8002`: not root, or in an unprivileged container.
    #[error("HCCS ping mesh needs root (in a container: a privileged one)")]
    NotPermitted,
    /// The task's parameters are outside libdcmi's limits.
    #[error("invalid ping-mesh task: {0}")]
    InvalidTask(String),
    /// Any other DCMI error code.
    #[error("DCMI error {0} ({name})", name = codes::name(*.0))]
    Dcmi(i32),
    /// The call missed its deadline, or was not issued because DCMI calls are stuck.
    #[error("the DCMI call did not answer in time")]
    NoAnswer,
}

impl MeshError {
    /// Whether asking again on this node is pointless.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            MeshError::NotAvailable | MeshError::NotPermitted | MeshError::InvalidTask(_)
        )
    }

    fn from_raw(raw: Raw) -> Self {
        match raw {
            Raw::Missing | Raw::Code(codes::NOT_SUPPORT) => MeshError::NotAvailable,
            Raw::Code(codes::OPER_NOT_PERMITTED) => MeshError::NotPermitted,
            Raw::Code(c) => MeshError::Dcmi(c),
        }
    }
}

/// The ping-mesh functions on one loaded library, each call with a deadline.
pub struct PingMesh {
    runner: Runner,
    deadline: Duration,
    lib: Arc<DcmiLib>,
}

impl std::fmt::Debug for PingMesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PingMesh")
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// `port_id` of every ping-mesh call: reserved, must be 0.
const PORT: i32 = 0;

impl PingMesh {
    /// A handle with its own call thread; at most `max_stuck` of its calls may hang.
    pub(super) fn new(lib: Arc<DcmiLib>, deadline: Duration, max_stuck: usize) -> Self {
        Self {
            runner: Runner::new(lib.clone(), max_stuck),
            deadline,
            lib,
        }
    }

    /// The ping-mesh functions a task needs that the library lacks: start, stop, and
    /// one of the two info functions (the state function is optional: without it an
    /// empty reading says a task stopped). Empty when the mesh can be driven.
    pub fn missing_functions(&self) -> Vec<&'static str> {
        let present: std::collections::BTreeMap<&str, bool> =
            self.lib.symbol_presence().into_iter().collect();
        let has = |f: &str| present.get(f).copied().unwrap_or(false);
        let mut missing: Vec<&'static str> =
            ["dcmi_start_hccsping_mesh", "dcmi_stop_hccsping_mesh"]
                .into_iter()
                .filter(|f| !has(f))
                .collect();
        if !has("dcmi_get_hccsping_mesh_info") && !has("dcmi_get_hccsping_mesh_info_v2") {
            missing.push("dcmi_get_hccsping_mesh_info");
        }
        missing
    }

    fn run<T, F>(&mut self, what: &str, chip: ChipAddress, f: F) -> Result<T, MeshError>
    where
        T: Send + 'static,
        F: FnOnce(&DcmiLib) -> Result<T, Raw> + Send + 'static,
    {
        let key = format!("{what}@{}/{}", chip.card, chip.device);
        match self.runner.call(&key, self.deadline, f) {
            Ok(r) => r.map_err(MeshError::from_raw),
            Err(_) => Err(MeshError::NoAnswer),
        }
    }

    /// Starts (or restarts) `task` on `chip`.
    pub fn start(&mut self, chip: ChipAddress, task: &MeshTask) -> Result<(), MeshError> {
        task.validate()?;
        let op = task.operate();
        self.run("dcmi_start_hccsping_mesh", chip, move |l| {
            l.mesh_start(chip.card, chip.device, PORT, &op)
        })
    }

    /// The statistics of task `task_id` on `chip`, one entry per destination. Empty after a
    /// chip reset dropped the task (then [`Self::state`] is [`MeshState::Stopped`]).
    pub fn info(
        &mut self,
        chip: ChipAddress,
        task_id: u32,
    ) -> Result<Vec<MeshDestination>, MeshError> {
        let raw = self.run("dcmi_get_hccsping_mesh_info", chip, move |l| {
            l.mesh_info(chip.card, chip.device, PORT, task_id)
        })?;
        Ok(raw.into_iter().map(MeshDestination::from_raw).collect())
    }

    /// Whether task `task_id` runs on `chip`.
    pub fn state(&mut self, chip: ChipAddress, task_id: u32) -> Result<MeshState, MeshError> {
        let v = self.run("dcmi_get_hccsping_mesh_state", chip, move |l| {
            l.mesh_state(chip.card, chip.device, PORT, task_id)
        })?;
        Ok(MeshState::from_raw(v))
    }

    /// Stops task `task_id` on `chip`.
    pub fn stop(&mut self, chip: ChipAddress, task_id: u32) -> Result<(), MeshError> {
        self.run("dcmi_stop_hccsping_mesh", chip, move |l| {
            l.mesh_stop(chip.card, chip.device, PORT, task_id)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn a_valid_task_becomes_the_c_values() {
        let t = MeshTask::new(
            vec![ip("192.0.2.199"), ip("192.0.3.198"), ip("192.0.2.199")],
            5,
        );
        assert_eq!(t.validate(), Ok(()));
        let op = t.operate();
        assert_eq!(op.dst_addr_list, "192.0.2.199,192.0.3.198");
        assert_eq!(
            (
                op.pkt_size,
                op.pkt_send_num,
                op.pkt_interval,
                op.task_interval
            ),
            (1792, 10, 10, 5)
        );
        assert_eq!((op.timeout, op.task_id), (0, 0));
        assert_eq!(t.first_result_after(), Duration::from_millis(5100));
    }

    #[test]
    fn the_longest_list_fits_the_c_buffer() {
        let dests: Vec<Ipv4Addr> = (0..48u8)
            .map(|i| Ipv4Addr::new(192, 255, 2 + i / 16, 199 - i))
            .collect();
        let t = MeshTask::new(dests, 1);
        assert_eq!(t.validate(), Ok(()));
        assert!(t.operate().dst_addr_list.len() < ffi::MESH_ADDR_LIST_LEN);
    }

    #[test]
    fn out_of_range_tasks_are_refused_with_the_reason() {
        let ok = MeshTask::new(vec![ip("192.0.2.199")], 5);
        let refused = |t: MeshTask, what: &str| {
            let e = t.validate().unwrap_err();
            assert!(matches!(e, MeshError::InvalidTask(_)), "{e:?}");
            assert!(e.to_string().contains(what), "{e}");
            assert!(e.is_permanent());
        };
        refused(
            MeshTask {
                destinations: vec![],
                ..ok.clone()
            },
            "0 distinct",
        );
        let many: Vec<Ipv4Addr> = (0..49u8).map(|i| Ipv4Addr::new(192, 0, 2, i)).collect();
        refused(
            MeshTask {
                destinations: many,
                ..ok.clone()
            },
            "49 distinct",
        );
        refused(
            MeshTask {
                destinations: vec![ip("10.0.0.1")],
                ..ok.clone()
            },
            "10.0.0.1",
        );
        refused(
            MeshTask {
                packet_size: 1791,
                ..ok.clone()
            },
            "packet_size 1791",
        );
        refused(
            MeshTask {
                packet_size: 3001,
                ..ok.clone()
            },
            "packet_size",
        );
        refused(
            MeshTask {
                packets_per_round: 0,
                ..ok.clone()
            },
            "packets_per_round",
        );
        refused(
            MeshTask {
                packet_interval_ms: 1001,
                ..ok.clone()
            },
            "packet_interval_ms",
        );
        refused(
            MeshTask {
                round_interval_secs: 0,
                ..ok.clone()
            },
            "round_interval_secs",
        );
        refused(
            MeshTask {
                round_interval_secs: 61,
                ..ok.clone()
            },
            "round_interval_secs",
        );
        refused(
            MeshTask {
                task_id: 2,
                ..ok.clone()
            },
            "task_id",
        );
        // 48 duplicates of one address are one destination.
        let dup = MeshTask {
            destinations: vec![ip("192.0.2.1"); 60],
            ..ok
        };
        assert_eq!(dup.validate(), Ok(()));
    }

    #[test]
    fn raw_statistics_convert_with_the_one_time_unit() {
        let d = MeshDestination::from_raw(MeshDestRaw {
            addr: "192.0.2.199".into(),
            suc_pkt_num: 9,
            fail_pkt_num: 1,
            max_time: 300,
            min_time: 100,
            avg_time: 150,
            tp95_time: 250,
            reply_stat_num: 2,
            ping_total_num: 7,
            l1_plane_check_res: Some(0),
        });
        assert_eq!(d.max_seconds, Some(300.0 * MESH_TIME_UNIT_SECONDS));
        assert_eq!(d.avg_seconds, Some(150.0 * MESH_TIME_UNIT_SECONDS));
        assert_eq!(d.loss_ratio(), Some(0.1));
        assert_eq!((d.rounds_in_stats, d.rounds_total), (2, 7));
        // -1: the destination was not pinged.
        let n = MeshDestination::from_raw(MeshDestRaw {
            addr: "192.0.2.198".into(),
            suc_pkt_num: 0,
            fail_pkt_num: 0,
            max_time: -1,
            min_time: -1,
            avg_time: -1,
            tp95_time: -1,
            reply_stat_num: -1,
            ping_total_num: 0,
            l1_plane_check_res: None,
        });
        assert_eq!(
            (n.max_seconds, n.min_seconds, n.avg_seconds, n.p95_seconds),
            (None, None, None, None)
        );
        assert_eq!(n.loss_ratio(), None);
        assert_eq!(n.rounds_in_stats, 0);
    }

    #[test]
    fn errors_and_states_classify() {
        assert_eq!(MeshError::from_raw(Raw::Missing), MeshError::NotAvailable);
        assert_eq!(
            MeshError::from_raw(Raw::Code(-8255)),
            MeshError::NotAvailable
        );
        assert_eq!(
            MeshError::from_raw(Raw::Code(-8002)),
            MeshError::NotPermitted
        );
        assert_eq!(
            MeshError::from_raw(Raw::Code(-8001)),
            MeshError::Dcmi(-8001)
        );
        assert!(!MeshError::Dcmi(-8006).is_permanent());
        assert!(!MeshError::NoAnswer.is_permanent());
        assert!(
            MeshError::Dcmi(-8001)
                .to_string()
                .contains("INVALID_PARAMETER")
        );
        assert_eq!(MeshState::from_raw(0), MeshState::Stopped);
        assert_eq!(MeshState::from_raw(1), MeshState::Running);
        assert_eq!(MeshState::from_raw(7), MeshState::Unknown(7));
    }
}
