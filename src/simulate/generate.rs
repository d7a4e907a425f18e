//! Random scenarios for out-of-sample checks (filled in below).

use super::scenario::{Scenario, ScenarioError};

/// A random scenario (placeholder).
pub fn generate(_seed: u64) -> Result<Scenario, ScenarioError> {
    Ok(Scenario::campaign())
}
