//! `[device_probe]`: pings between the NPUs' own ports, and the HCCS ping mesh.

use std::time::Duration;

use super::section;
use crate::config::duration;
use crate::config::schema::{Spec, ms, secs};

section! {
    /// `[device_probe]`: pings between the NPUs' own RoCE ports, the path training traffic
    /// takes.
    pub struct DeviceProbeSection in "device_probe" {
        /// Probe the device plane when probing runs and `hccn_tool` and device IPs are
        /// found.
        enabled: bool = true, Spec::BOOL;
        /// Pings each NPU port sends per device-plane round (3 packets each).
        pings_per_round: u32 = 4, Spec::int(0, 16);
        /// Packets per second per NPU the device plane may cost (sent and answered); the
        /// pings per round are cut to fit at `device_probe.interval`.
        max_packets_per_second: f64 = 1.5, Spec::float(0.0, 10.0);
        /// How often the device plane runs: on probe rounds this far apart (a whole number
        /// of `probe.interval`s, at least one), so that its ping budget and its engine's
        /// holds, counted in its own rounds, mean the same time whatever the host plane's
        /// cadence.
        #[serde(with = "duration::serde_str")]
        interval: Duration = secs(20), Spec::duration(ms(1_000), ms(3_600_000));
        /// Most re-pings (of suspect ports and pairs) this node runs per round.
        confirm_cap: u32 = 16, Spec::int(0, 256);
        /// Drive the DCMI HCCS ping mesh (Atlas A3) when the device plane runs and DCMI
        /// offers it.
        hccs: bool = true, Spec::BOOL;
        /// Rounds of the resident HCCS ping-mesh task (its `task_interval`): whole seconds,
        /// 1 s to 60 s.
        #[serde(with = "duration::serde_str")]
        hccs_round_interval: Duration = secs(5), Spec::duration(ms(1_000), ms(60_000));
        /// How often the HCCS ping-mesh results are read (and a stopped task restarted); at
        /// least one round interval plus a second.
        #[serde(with = "duration::serde_str")]
        hccs_read_interval: Duration = secs(30), Spec::duration(ms(2_000), ms(3_600_000));
        /// This node's super-pod: NPUs ping over HCCS only members with the same value
        /// (vNIC addresses repeat across super-pods). Unset on every member: one super-pod.
        hccs_super_pod: Option<u32> = None, Spec::int(0, u32::MAX as i64);
    }
}
