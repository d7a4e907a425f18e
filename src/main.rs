//! The `hcclwatch` binary: parse the command line, call into the library.

mod bench_cli;
mod cli;
mod demo_cli;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use hcclwatch::config::{self, Backend, Config, ConfigError, LogFormat};
use hcclwatch::export::metrics::BuildInfo;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match args.command {
        cli::Command::Version => {
            let b = BuildInfo::current();
            println!(
                "hcclwatch {} (commit {}, built {})",
                b.version, b.revision, b.build_date
            );
            ExitCode::SUCCESS
        }
        cli::Command::CheckConfig { path } => check_config(&path),
        cli::Command::Bench(args) => bench_cli::main(*args),
        cli::Command::Simulate(a) => simulate(&a),
        cli::Command::Demo(a) => match demo_cli::main(&a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("hcclwatch demo: {e:#}");
                ExitCode::FAILURE
            }
        },
        cli::Command::Remediate(a) => match remediate(&a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("hcclwatch remediate: {e:#}");
                ExitCode::FAILURE
            }
        },
        cli::Command::Run(run) => match run_daemon(&run) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("hcclwatch: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

fn remediate(a: &cli::RemediateArgs) -> anyhow::Result<()> {
    let cfg = hcclwatch::remediate::config::RemediateConfig::load(&a.config_file)?;
    if a.check {
        println!("{}: valid", a.config_file.display());
        return Ok(());
    }
    let format = if a.log_format == "json" {
        LogFormat::Json
    } else {
        LogFormat::Logfmt
    };
    hcclwatch::logging::init(&a.log_level, format).context("setting up logging")?;
    hcclwatch::remediate::run(cfg)?;
    Ok(())
}

fn simulate(a: &cli::SimulateArgs) -> ExitCode {
    let hours_ok = a.hours > 0.0 && a.hours <= 1000.0;
    if !(4..=10_000).contains(&a.nodes) || !hours_ok || !(2..=1024).contains(&a.group_size) {
        eprintln!(
            "hcclwatch simulate: --nodes must be 4..=10000, --hours in (0, 1000] and --group-size 2..=1024"
        );
        return ExitCode::FAILURE;
    }
    let health = match &a.config_file {
        None => hcclwatch::health::HealthConfig::default(),
        Some(p) => match config::load(Some(p), &process_env()) {
            Ok(c) => c.health.engine(),
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
    let o = hcclwatch::health::sim::SimOptions {
        nodes: a.nodes,
        hours: a.hours,
        seed: a.seed,
        congestion: !a.no_congestion,
        group_size: a.group_size,
        health,
    };
    let r = hcclwatch::health::sim::run(&o);
    if a.json {
        match serde_json::to_string_pretty(&r) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("hcclwatch simulate: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", hcclwatch::health::sim::text(&r));
    }
    ExitCode::SUCCESS
}

fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with("HCCLWATCH_"))
        .collect()
}

fn check_config(path: &std::path::Path) -> ExitCode {
    match config::load(Some(path), &process_env()) {
        Ok(_) => {
            println!("{}: ok", path.display());
            ExitCode::SUCCESS
        }
        Err(ConfigError::Invalid(problems)) => {
            for p in problems {
                eprintln!("{p}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Applies command-line flags over the loaded config. The file and environment were
/// already valid, so any problem found now was introduced by a flag and is reported as
/// such.
fn apply_flags(mut cfg: Config, run: &cli::RunArgs) -> Result<Config, Vec<config::Problem>> {
    let overrides = run.overrides();
    let mut problems = Vec::new();
    for (key, flag, value) in &overrides {
        match *key {
            "web.listen_address" => cfg.web.listen_address = value.clone(),
            "web.telemetry_path" => cfg.web.telemetry_path = value.clone(),
            "log.format" => {
                cfg.log.format = if value == "json" {
                    LogFormat::Json
                } else {
                    LogFormat::Logfmt
                }
            }
            "telemetry.backend" => {
                cfg.telemetry.backend = match value.as_str() {
                    "dcmi" => Backend::Dcmi,
                    "sim" => Backend::Sim,
                    "none" => Backend::None,
                    _ => Backend::Auto,
                }
            }
            "log.level" => {
                let kind = config::schema::lookup(key).map(|k| k.kind);
                match kind
                    .map(|k| config::schema::check_value(k, &toml::Value::String(value.clone())))
                {
                    Some(Err(reason)) => problems.push(config::Problem {
                        location: format!("flag {flag}"),
                        key: (*key).to_string(),
                        reason,
                    }),
                    _ => cfg.log.level = value.clone(),
                }
            }
            _ => {}
        }
    }
    for (key, reason) in cfg.validate() {
        let location = overrides.iter().find(|(k, _, _)| *k == key).map_or_else(
            || "flags".to_string(),
            |(_, flag, _)| format!("flag {flag}"),
        );
        problems.push(config::Problem {
            location,
            key,
            reason,
        });
    }
    if problems.is_empty() {
        Ok(cfg)
    } else {
        Err(problems)
    }
}

fn run_daemon(run: &cli::RunArgs) -> anyhow::Result<()> {
    let loaded = config::load(run.config_file.as_deref(), &process_env());
    let cfg = match loaded {
        Ok(c) => c,
        Err(ConfigError::Invalid(problems)) => {
            for p in &problems {
                eprintln!("{p}");
            }
            anyhow::bail!("configuration has {} problem(s); see above", problems.len());
        }
        Err(e) => return Err(e.into()),
    };
    let cfg = match apply_flags(cfg, run) {
        Ok(c) => c,
        Err(problems) => {
            for p in &problems {
                eprintln!("{p}");
            }
            anyhow::bail!(
                "command-line flags have {} problem(s); see above",
                problems.len()
            );
        }
    };
    hcclwatch::logging::init(&cfg.log.level, cfg.log.format).context("setting up logging")?;
    let reload_args = run.clone();
    let reload: hcclwatch::app::Reloader = std::sync::Arc::new(move || {
        let cfg = match config::load(reload_args.config_file.as_deref(), &process_env()) {
            Ok(c) => c,
            Err(ConfigError::Invalid(problems)) => {
                return Err(problems.iter().map(ToString::to_string).collect());
            }
            Err(e) => return Err(vec![e.to_string()]),
        };
        apply_flags(cfg, &reload_args).map_err(|p| p.iter().map(ToString::to_string).collect())
    });
    let env = hcclwatch::app::Environment {
        ld_library_path: std::env::var("LD_LIBRARY_PATH").ok(),
        reload: Some(reload),
    };
    hcclwatch::app::run(cfg, env)?;
    Ok(())
}
