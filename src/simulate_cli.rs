//! `hcclwatch simulate`: the fleet simulator on the command line.

use std::process::ExitCode;

use hcclwatch::config::{self, ConfigError};
use hcclwatch::simulate::{Engines, Overrides, Scenario, ScenarioError};

use crate::cli;

/// Loads the scenarios (files, generated ones, or the built-in campaign), applies the
/// flags, rescales them to the probe interval, runs them with the thresholds of
/// `--config.file` (else the shipped ones) and prints the report (pooled, for a batch or
/// several files) as text or JSON.
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
    // The cadence: the flag, else the config file's probe.interval, else the shipped one.
    let config = match &a.config_file {
        None => None,
        Some(p) => match config::load(Some(p), &crate::process_env()) {
            Ok(c) => Some(c),
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
    let interval = a
        .probe_interval
        .or_else(|| config.as_ref().map(|c| c.probe.interval));
    let scenarios = match scenarios(a, interval) {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    if a.print_scenario {
        for s in &scenarios {
            print!("{}", s.to_toml());
        }
        return ExitCode::SUCCESS;
    }
    let health = config
        .as_ref()
        .map_or_else(hcclwatch::health::HealthConfig::default, |c| {
            hcclwatch::probe::settings::health_config(&c.health)
        });
    // The device plane runs every device_probe.interval, in whole probe rounds.
    let device_interval = config.as_ref().map_or_else(
        || config::Config::default().device_probe.interval,
        |c| c.device_probe.interval,
    );
    let probe_interval =
        interval.unwrap_or_else(hcclwatch::probe::settings::default_probe_interval);
    let engines = Engines {
        health,
        device_every: hcclwatch::probe::settings::device_every(device_interval, probe_interval),
        ..Engines::default()
    };
    let mut runs = Vec::new();
    for s in &scenarios {
        match hcclwatch::simulate::simulate(s, &engines) {
            Ok(r) => runs.push(r),
            Err(e) => return fail(&e),
        }
    }
    let pooled_batch = a.batch.is_some() || a.scenario.len() > 1;
    let printed = match (pooled_batch.then_some(()), a.json) {
        (None, true) => serde_json::to_string_pretty(&runs[0]),
        (None, false) => Ok(hcclwatch::simulate::text(&runs[0])),
        (Some(_), json) => {
            let pooled = hcclwatch::simulate::batch::pool(&runs);
            if json {
                serde_json::to_string_pretty(&serde_json::json!({ "runs": runs, "pooled": pooled }))
            } else {
                Ok(hcclwatch::simulate::batch::text(&runs, &pooled))
            }
        }
    };
    match printed {
        Ok(s) => {
            print!("{s}");
            if a.json {
                println!();
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hcclwatch simulate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A held-out scenario generator: out of distribution (`--generate`) or in sample
/// (`--generate-in-sample`).
type Generator = fn(u64) -> Result<Scenario, ScenarioError>;

/// The scenarios to run: one, or `--batch` of them (generated from the `--generate` or
/// `--generate-in-sample` seed up, else the scenario with successive seeds), each with the
/// flags applied.
/// `interval` is the probe interval to run at (None: the shipped one).
fn scenarios(
    a: &cli::SimulateArgs,
    interval: Option<std::time::Duration>,
) -> Result<Vec<Scenario>, ScenarioError> {
    let overrides = Overrides {
        nodes: a.nodes,
        hours: a.hours,
        seed: a.seed,
        group_size: a.group_size,
        no_congestion: a.no_congestion,
        probe_interval: interval,
    };
    let n = a.batch.unwrap_or(1);
    let mut out = Vec::new();
    let generated = match (a.generate, a.generate_in_sample) {
        (Some(seed), _) if a.device_counters => Some((
            seed,
            hcclwatch::simulate::ood::generate_with_device_counters as Generator,
        )),
        (Some(seed), _) => Some((seed, hcclwatch::simulate::ood::generate as Generator)),
        (None, Some(seed)) => Some((seed, hcclwatch::simulate::generate::generate as Generator)),
        (None, None) => None,
    };
    if let Some((seed, generate)) = generated {
        for k in 0..n {
            let s = generate(seed + k)?;
            let name = s.name.clone();
            out.push(overrides.apply(s, &name)?);
        }
        return Ok(out);
    }
    let bases = if a.scenario.is_empty() {
        vec![(Scenario::campaign(), "scenarios/campaign.toml".to_string())]
    } else {
        a.scenario
            .iter()
            .map(|p| Ok((Scenario::load(p)?, p.display().to_string())))
            .collect::<Result<Vec<_>, ScenarioError>>()?
    };
    for (base, name) in bases {
        let base = overrides.apply(base, &name)?;
        for k in 0..n {
            let mut s = base.clone();
            s.fleet.seed = base.fleet.seed + k;
            out.push(s);
        }
    }
    Ok(out)
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
