//! `hcclwatch simulate`: the fleet simulator on the command line.

use std::process::ExitCode;

use hcclwatch::config::{self, ConfigError};

use crate::cli;

/// Runs the simulator with the thresholds of `--config.file` (else the shipped ones) and
/// prints its report as text or JSON.
pub fn main(a: &cli::SimulateArgs) -> ExitCode {
    let hours_ok = a.hours > 0.0 && a.hours <= 1000.0;
    if !(4..=10_000).contains(&a.nodes) || !hours_ok || !(2..=1024).contains(&a.group_size) {
        eprintln!(
            "hcclwatch simulate: --nodes must be 4..=10000, --hours in (0, 1000] and --group-size 2..=1024"
        );
        return ExitCode::FAILURE;
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
    let o = hcclwatch::simulate::SimOptions {
        nodes: a.nodes,
        hours: a.hours,
        seed: a.seed,
        congestion: !a.no_congestion,
        group_size: a.group_size,
        health,
    };
    let r = hcclwatch::simulate::run(&o);
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
