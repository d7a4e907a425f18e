//! `hcclwatch simulate`: the health engines fed synthetic measurements of a scenario with
//! known faults, so that their verdicts can be scored against ground truth.
//!
//! - [`scenario`]: the scenario file (fleet, noise, congestion, faults) and its checks
//!   ([`validate`]);
//! - [`world`]: the scenario made concrete with its seed; every effect is a function of the
//!   round, and the engines learn of it only through [`world::World::host_probe`] and
//!   [`world::World::device_ping`];
//! - [`device`]: NPU ports pinging on the prober's rotating plan;
//! - [`run`]: one host engine and one device engine per probe group, as the daemons run
//!   them;
//! - [`verdicts`], [`score`], [`targets`], [`report`]: honest scoring (per verdict and per
//!   fault episode) and the report;
//! - [`generate`]: random scenarios from the shipped families, with seeds disjoint from the
//!   shipped ones, for out-of-sample checks.

pub mod device;
pub mod generate;
pub mod report;
pub mod run;
pub mod scenario;
pub mod score;
pub mod targets;
pub mod validate;
pub mod verdicts;
pub mod world;

pub use report::{Report, text};
pub use scenario::{Scenario, ScenarioError};

use crate::health::HealthConfig;
use crate::health::device::DeviceConfig;

/// The thresholds of both engines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Engines {
    /// Host plane.
    pub health: HealthConfig,
    /// Device plane.
    pub device: DeviceConfig,
}

/// Command-line overrides of a scenario (today's `simulate` flags).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// `--nodes`.
    pub nodes: Option<usize>,
    /// `--hours`.
    pub hours: Option<f64>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--group-size`.
    pub group_size: Option<usize>,
    /// `--no-congestion`: drop every congestion process.
    pub no_congestion: bool,
}

impl Overrides {
    /// The scenario with these overrides, checked again (`file` names it in messages).
    pub fn apply(&self, mut s: Scenario, file: &str) -> Result<Scenario, ScenarioError> {
        if let Some(n) = self.nodes {
            s.fleet.nodes = n;
        }
        if let Some(h) = self.hours {
            s.fleet.hours = Some(h);
            s.fleet.rounds = None;
        }
        if let Some(x) = self.seed {
            s.fleet.seed = x;
        }
        if let Some(g) = self.group_size {
            s.fleet.group_size = g;
        }
        if self.no_congestion {
            s.congestion.clear();
        }
        s.check(file)
    }
}

/// Runs a checked scenario through the engines and scores it.
pub fn simulate(s: &Scenario, e: &Engines) -> Result<Report, ScenarioError> {
    let w = world::World::new(s).map_err(|p| {
        ScenarioError::Invalid(
            p.into_iter()
                .map(|(key, reason)| scenario::Problem {
                    location: s.name.clone(),
                    key,
                    reason,
                })
                .collect(),
        )
    })?;
    let t = run::run(&w, &e.health, &e.device);
    Ok(report::report(&w, &t, e.health.window as u64))
}
