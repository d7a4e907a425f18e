//! The `hcclwatch` binary: parse the command line, call into the library.

mod bench_cli;
mod cli;
mod demo_cli;
mod override_cli;
mod simulate_cli;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use hcclwatch::config::{self, ConfigError};
use hcclwatch::snapshot::status::BuildInfo;

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
        cli::Command::CheckConfig { path, syntax_only } => check_config(&path, syntax_only),
        cli::Command::Bench(args) => bench_cli::main(*args),
        cli::Command::Simulate(a) => simulate_cli::main(&a),
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
        cli::Command::Override(a) => override_cli::main(&a),
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
    let mut cfg = hcclwatch::remediate::config::RemediateConfig::load(&a.config_file)?;
    if let Some(w) = &a.web_config_file {
        if let Err(problems) = config::web::WebConfigFile::load(w) {
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            anyhow::bail!("--web.config.file: {}", problems.join("; "));
        }
        cfg.web_config_file = Some(w.clone());
    }
    if a.check {
        println!("{}: valid", a.config_file.display());
        return Ok(());
    }
    hcclwatch::logging::init(&a.log_level, a.log_format).context("setting up logging")?;
    hcclwatch::remediate::run(cfg)?;
    Ok(())
}

/// The `HCCLWATCH_*` variables of the process environment.
fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with("HCCLWATCH_"))
        .collect()
}

fn check_config(path: &std::path::Path, syntax_only: bool) -> ExitCode {
    let loaded = if syntax_only {
        config::load(Some(path), &process_env()).map(|config| config::Loaded {
            config,
            warnings: Vec::new(),
        })
    } else {
        config::load_checked(Some(path), &process_env())
    };
    match loaded {
        Ok(loaded) => {
            for w in &loaded.warnings {
                eprintln!("warning: {w}");
            }
            // The topology file is checked like the configuration (the daemon itself runs
            // on without it when it is bad).
            let t = &loaded.config.topology;
            if let (false, true, Some(f)) = (syntax_only, t.enabled, &t.file)
                && let Err(e) = hcclwatch::topology::file::read(f, t.deadline)
            {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
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

fn run_daemon(run: &cli::RunArgs) -> anyhow::Result<()> {
    let loaded = config::load_checked(run.config_file.as_deref(), &process_env());
    let (cfg, warnings) = match loaded {
        Ok(l) => (l.config, l.warnings),
        Err(ConfigError::Invalid(problems)) => {
            for p in &problems {
                eprintln!("{p}");
            }
            anyhow::bail!("configuration has {} problem(s); see above", problems.len());
        }
        Err(e) => return Err(e.into()),
    };
    let cfg = match config::overrides::apply(cfg, &run.overrides()) {
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
    hcclwatch::logging::init(cfg.log.level.as_str(), cfg.log.format)
        .context("setting up logging")?;
    for w in &warnings {
        tracing::warn!(location = %w.location, key = %w.key, "{}", w.reason);
    }
    let reload_args = run.clone();
    let reload: hcclwatch::app::Reloader = std::sync::Arc::new(move || {
        let cfg = match config::load_checked(reload_args.config_file.as_deref(), &process_env()) {
            Ok(l) => l.config,
            Err(ConfigError::Invalid(problems)) => return Err(problems),
            Err(e) => return Err(vec![config::Problem::reason(e)]),
        };
        config::overrides::apply(cfg, &reload_args.overrides())
    });
    let env = hcclwatch::app::Environment {
        ld_library_path: std::env::var("LD_LIBRARY_PATH").ok(),
        reload: Some(reload),
    };
    hcclwatch::app::run(cfg, env)?;
    Ok(())
}
