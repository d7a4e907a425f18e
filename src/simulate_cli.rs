//! `hcclwatch simulate`: the fleet simulator on the command line.

use std::process::ExitCode;

use hcclwatch::config::{self, ConfigError};
use hcclwatch::simulate::{Engines, Overrides, Scenario, ScenarioError};

use crate::cli;

/// Loads the scenario (a file, a generated one, or the built-in campaign), applies the
/// flags, runs it with the thresholds of `--config.file` (else the shipped ones) and
/// prints the report as text or JSON.
pub fn main(a: &cli::SimulateArgs) -> ExitCode {
    let nodes_ok = a.nodes.is_none_or(|n| (4..=10_000).contains(&n));
    let hours_ok = a.hours.is_none_or(|h| h > 0.0 && h <= 1000.0);
    let group_ok = a.group_size.is_none_or(|g| (2..=1024).contains(&g));
    if !(nodes_ok && hours_ok && group_ok) {
        eprintln!(
            "hcclwatch simulate: --nodes must be 4..=10000, --hours in (0, 1000] and --group-size 2..=1024"
        );
        return ExitCode::FAILURE;
    }
    let (loaded, name) = match (&a.scenario, a.generate) {
        (Some(p), _) => (Scenario::load(p), p.display().to_string()),
        (None, Some(seed)) => (
            hcclwatch::simulate::generate::generate(seed),
            format!("generated scenario {seed}"),
        ),
        (None, None) => (Ok(Scenario::campaign()), "scenarios/campaign.toml".into()),
    };
    let overrides = Overrides {
        nodes: a.nodes,
        hours: a.hours,
        seed: a.seed,
        group_size: a.group_size,
        no_congestion: a.no_congestion,
    };
    let scenario = match loaded.and_then(|s| overrides.apply(s, &name)) {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    if a.print_scenario {
        print!("{}", scenario.to_toml());
        return ExitCode::SUCCESS;
    }
    let health = match &a.config_file {
        None => hcclwatch::health::HealthConfig::default(),
        Some(p) => match config::load(Some(p), &crate::process_env()) {
            Ok(c) => hcclwatch::probe::settings::health_config(&c.health),
            Err(ConfigError::Invalid(problems)) => {
                for p in problems {
                    eprintln!("{p}");
                }
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let engines = Engines {
        health,
        ..Engines::default()
    };
    let r = match hcclwatch::simulate::simulate(&scenario, &engines) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    if a.json {
        match serde_json::to_string_pretty(&r) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("hcclwatch simulate: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", hcclwatch::simulate::text(&r));
    }
    ExitCode::SUCCESS
}

fn fail(e: &ScenarioError) -> ExitCode {
    match e {
        ScenarioError::Invalid(problems) => {
            for p in problems {
                eprintln!("{p}");
            }
        }
        ScenarioError::Read { .. } => eprintln!("hcclwatch simulate: {e}"),
    }
    ExitCode::FAILURE
}
