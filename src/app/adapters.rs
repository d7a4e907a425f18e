//! The adapters from the telemetry handles to the device prober's interfaces:
//! `hccn_tool -ping` as its [`Pinger`], the DCMI HCCS ping mesh as its [`MeshDriver`].
//! The prober knows neither `hccn_tool` nor DCMI; this is where the two meet.

use std::net::Ipv4Addr;
use std::sync::Arc;

use crate::probe::device::hccs::{
    Availability, HccsTask, MeshCallError, MeshDriver, MeshSample, TaskState, Unavailable,
};
use crate::probe::device::runner::{PingError, PingReply, Pinger};
use crate::snapshot::Store;
use crate::snapshot::npu::ChipAddress;
use crate::telemetry::dcmi::PingMesh;
use crate::telemetry::dcmi::pingmesh::{MeshError, MeshState, MeshTask};
use crate::telemetry::hccn::Hccn;

/// `hccn_tool -ping` as the device plane's pinger.
pub(super) struct HccnPinger(pub(super) Arc<Hccn>);

impl Pinger for HccnPinger {
    fn ping(&self, phy: u32, dst: Ipv4Addr) -> Result<PingReply, PingError> {
        use crate::telemetry::hccn::HccnError as E;
        match self.0.ping(phy, dst) {
            Ok(r) => Ok(PingReply {
                sent: r.sent,
                received: r.received,
                rtts: r.rtts.iter().flatten().copied().collect(),
            }),
            Err(E::NotSupported) => Err(PingError::Unsupported),
            Err(E::Busy(_)) => Err(PingError::Busy),
            Err(E::Timeout(_) | E::QueueTimeout(_)) => Err(PingError::Timeout),
            Err(e) => Err(PingError::Failed(e.to_string())),
        }
    }
}

/// The DCMI HCCS ping mesh as the device plane's [`MeshDriver`]: NPUs by physical id,
/// addressed through the NPU inventory the poller publishes.
pub(super) struct DcmiMesh {
    /// The ping-mesh handle (its own call thread, the same deadlines as the poller's).
    pub(super) mesh: PingMesh,
    /// Where the NPU inventory is read.
    pub(super) store: Arc<Store>,
}

impl DcmiMesh {
    fn chip(&self, npu: u32) -> Result<ChipAddress, MeshCallError> {
        self.store
            .npu()
            .state
            .chips
            .get(&npu)
            .map(|c| c.address)
            .ok_or_else(|| MeshCallError::Failed(format!("NPU {npu} is not in the inventory")))
    }
}

/// A ping-mesh error as the prober sees it: unavailable (never asked again) or failed.
fn mesh_error(e: MeshError) -> MeshCallError {
    match e {
        MeshError::NotAvailable => MeshCallError::Unavailable(Unavailable::NotSupported),
        MeshError::NotPermitted => MeshCallError::Unavailable(Unavailable::NotPermitted),
        other => MeshCallError::Failed(other.to_string()),
    }
}

impl MeshDriver for DcmiMesh {
    fn available(&mut self) -> Result<Availability, Unavailable> {
        let missing = self.mesh.missing_functions();
        if !missing.is_empty() {
            tracing::debug!(missing = %missing.join(","), "DCMI ping-mesh functions missing");
            return Err(Unavailable::MissingFunction);
        }
        // Asked on the first NPU, as MindCluster NodeD does: -8255 there means not an A3.
        let Some(chip) = self
            .store
            .npu()
            .state
            .chips
            .values()
            .next()
            .map(|c| c.address)
        else {
            return Ok(Availability::Undecided);
        };
        match self.mesh.state(chip, 0) {
            Ok(_) => Ok(Availability::Available),
            Err(MeshError::NotAvailable) => {
                // The state function is optional; without it, ask the NPU with a read.
                match self.mesh.info(chip, 0) {
                    Ok(_) => Ok(Availability::Available),
                    Err(MeshError::NotAvailable) => Err(Unavailable::NotSupported),
                    Err(MeshError::NotPermitted) => Err(Unavailable::NotPermitted),
                    // A DCMI error or no answer: asked again at the next read.
                    Err(_) => Ok(Availability::Undecided),
                }
            }
            Err(MeshError::NotPermitted) => Err(Unavailable::NotPermitted),
            Err(_) => Ok(Availability::Undecided),
        }
    }

    fn start(&mut self, npu: u32, task: &HccsTask) -> Result<(), MeshCallError> {
        let chip = self.chip(npu)?;
        let t = MeshTask {
            task_id: task.task_id,
            packets_per_round: crate::probe::device::hccs::PACKETS_PER_ROUND,
            ..MeshTask::new(task.destinations.clone(), task.round_interval_secs)
        };
        self.mesh.start(chip, &t).map_err(mesh_error)
    }

    fn running(&mut self, npu: u32, task_id: u32) -> Result<TaskState, MeshCallError> {
        let chip = self.chip(npu)?;
        match self.mesh.state(chip, task_id) {
            Ok(MeshState::Running) => Ok(TaskState::Running),
            Ok(MeshState::Stopped) => Ok(TaskState::Stopped),
            Ok(MeshState::Unknown(v)) => Err(MeshCallError::Failed(format!("task state {v}"))),
            // No state function: the caller reads instead.
            Err(MeshError::NotAvailable) if self.mesh.missing_functions().is_empty() => {
                Ok(TaskState::Unknown)
            }
            Err(e) => Err(mesh_error(e)),
        }
    }

    fn read(&mut self, npu: u32, task_id: u32) -> Result<Vec<MeshSample>, MeshCallError> {
        let chip = self.chip(npu)?;
        let info = self.mesh.info(chip, task_id).map_err(mesh_error)?;
        Ok(info
            .into_iter()
            .map(|d| MeshSample {
                address: d.address,
                replies: u64::from(d.replies),
                losses: u64::from(d.losses),
                avg_seconds: d.avg_seconds,
            })
            .collect())
    }

    fn stop(&mut self, npu: u32, task_id: u32) -> Result<(), MeshCallError> {
        let chip = self.chip(npu)?;
        self.mesh.stop(chip, task_id).map_err(mesh_error)
    }
}
