//! The command line, node_exporter style: `--config.file`, `--web.listen-address`,
//! `--log.level`, `--log.format`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// hcclwatch: NPU fleet health monitor.
#[derive(Debug, Parser)]
#[command(name = "hcclwatch", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon.
    Run(RunArgs),
    /// Validate a config file; print every problem as PATH:LINE: key: reason.
    CheckConfig {
        /// The config file.
        path: PathBuf,
    },
    /// Print version, git commit and build date.
    Version,
}

/// Flags of `hcclwatch run`. Flags override the config file and the environment.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Config file (TOML). Without it, embedded defaults are used.
    #[arg(long = "config.file", value_name = "PATH")]
    pub config_file: Option<PathBuf>,
    /// Address to listen on, e.g. ":9478" or "127.0.0.1:9478".
    #[arg(long = "web.listen-address", value_name = "ADDR")]
    pub listen_address: Option<String>,
    /// Path under which to expose metrics.
    #[arg(long = "web.telemetry-path", value_name = "PATH")]
    pub telemetry_path: Option<String>,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long = "log.level", value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log format.
    #[arg(long = "log.format", value_name = "FORMAT", value_parser = ["logfmt", "json"])]
    pub log_format: Option<String>,
    /// Device backend: auto, dcmi, sim, none.
    #[arg(long = "telemetry.backend", value_name = "BACKEND", value_parser = ["auto", "dcmi", "sim", "none"])]
    pub backend: Option<String>,
}

impl RunArgs {
    /// The flags as (config key, flag name, value), for applying over the config.
    pub fn overrides(&self) -> Vec<(&'static str, &'static str, String)> {
        let mut v = Vec::new();
        let pairs: [(&str, &str, &Option<String>); 5] = [
            (
                "web.listen_address",
                "--web.listen-address",
                &self.listen_address,
            ),
            (
                "web.telemetry_path",
                "--web.telemetry-path",
                &self.telemetry_path,
            ),
            ("log.level", "--log.level", &self.log_level),
            ("log.format", "--log.format", &self.log_format),
            ("telemetry.backend", "--telemetry.backend", &self.backend),
        ];
        for (key, flag, value) in pairs {
            if let Some(value) = value {
                v.push((key, flag, value.clone()));
            }
        }
        v
    }
}
