//! The command line, node_exporter style: `--config.file`, `--web.listen-address`,
//! `--log.level`, `--log.format`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use hcclwatch::config::{Backend, LogFormat};

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
    /// Validate a config file and the files it names (the key, the web config and its
    /// certificates); print every problem as PATH:LINE: key: reason.
    CheckConfig {
        /// The config file.
        path: PathBuf,
        /// Check the file alone, not the files it names (for a config written for another
        /// machine, such as a pod's, whose key and certificates are mounted only there).
        #[arg(long = "syntax-only")]
        syntax_only: bool,
    },
    /// Print version, git commit and build date.
    Version,
    /// Benchmark the collective engine like hccl_test / nccl-tests.
    Bench(Box<BenchArgs>),
    /// Run the health engine on synthetic rounds with injected faults and report
    /// precision, recall, detection times and false-alarm rates.
    Simulate(SimulateArgs),
    /// Start a local fleet of daemons on 127.0.0.1 (one slowed by default) and watch the
    /// health engine find the slow node.
    Demo(DemoArgs),
    /// Serve the Alertmanager webhook that cordons, taints and annotates bad nodes, behind
    /// dry-run, a circuit breaker, cooldowns, selectors and a killswitch.
    Remediate(RemediateArgs),
    /// Hold a node or NPU healthy or quarantined until a time, end such an override, or
    /// release an escalated node; through the Kubernetes API, audited before the change.
    Override(crate::override_cli::OverrideArgs),
}

/// Flags of `hcclwatch remediate`.
#[derive(Debug, Clone, clap::Args)]
pub struct RemediateArgs {
    /// The receiver's config file (TOML; see deploy/remediate/remediate.toml).
    #[arg(long = "config.file", value_name = "PATH")]
    pub config_file: PathBuf,
    /// Only validate the config file: print every problem and exit.
    #[arg(long)]
    pub check: bool,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long = "log.level", value_name = "LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(
        long = "log.format",
        value_name = "FORMAT",
        value_enum,
        default_value = "logfmt"
    )]
    pub log_format: LogFormat,
    /// Prometheus exporter-toolkit web config file (TLS, client CA, basic auth for
    /// `/metrics`); overrides `web_config_file` in the receiver's config file.
    #[arg(long = "web.config.file", value_name = "PATH")]
    pub web_config_file: Option<PathBuf>,
}

/// Flags of `hcclwatch demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Daemons to start (2..=32).
    #[arg(long, default_value_t = 6)]
    pub nodes: usize,
    /// Cap NODE's probe throughput at FACTOR of the others' (0 < FACTOR < 1), e.g. `2=0.3`.
    /// Repeatable. Default: node 2 at 0.3 (with --healthy: none).
    #[arg(long, value_name = "NODE=FACTOR")]
    pub slow: Vec<String>,
    /// Cap the link between nodes A and B (both directions) at FACTOR of nominal
    /// (0 < FACTOR < 1), e.g. `1-4=0.3`: a link verdict, not a node verdict. Repeatable.
    #[arg(long = "bad-link", value_name = "A-B=FACTOR")]
    pub bad_link: Vec<String>,
    /// Slow no node (overrides the default slowdown).
    #[arg(long)]
    pub healthy: bool,
    /// Kill NODE's daemon SECONDS after the start, e.g. `4@30`. Repeatable.
    #[arg(long, value_name = "NODE@SECONDS")]
    pub kill: Vec<String>,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// At the end, write every node's final state, with reasons, to this file (JSON).
    #[arg(long = "json-out", value_name = "FILE")]
    pub json_out: Option<PathBuf>,
    /// Give every node K fake NPU ports (1..=16) on one shared fake fabric, pinged by the
    /// device plane through the fake `hccn_tool`; the probe interval becomes 2.4 s.
    #[arg(long, value_name = "K")]
    pub npus: Option<usize>,
    /// The fake `hccn_tool` binary (`fake-hccn`); default: next to this executable.
    #[arg(long = "hccn-tool", value_name = "PATH")]
    pub hccn_tool: Option<PathBuf>,
    /// Make NPU port NODE:NPU lose LOSS of its packets (0 <= LOSS <= 1), e.g. `2:1=0.2`.
    /// Repeatable; needs --npus.
    #[arg(long = "lossy-port", value_name = "NODE:NPU=LOSS")]
    pub lossy_port: Vec<String>,
    /// Take NPU port NODE:NPU's link down, e.g. `3:0`. Repeatable; needs --npus.
    #[arg(long = "down-port", value_name = "NODE:NPU")]
    pub down_port: Vec<String>,
    /// Split the nodes into N ToRs of consecutive nodes (`tor-0` holds the first), written
    /// to a topology file every daemon reads. Default: no topology, or 2 ToRs with
    /// --slow-tor or --lossy-tor.
    #[arg(long, value_name = "N")]
    pub tors: Option<usize>,
    /// Slow every probe touching a member of ToR T to FACTOR of nominal (0 < FACTOR < 1),
    /// e.g. `1=0.5`: a ToR verdict, and no node verdict. Repeatable.
    #[arg(long = "slow-tor", value_name = "TOR=FACTOR")]
    pub slow_tor: Vec<String>,
    /// Make every NPU port of ToR T's members lose LOSS of its packets (0 <= LOSS <= 1),
    /// e.g. `0=0.05`. Repeatable; needs --npus.
    #[arg(long = "lossy-tor", value_name = "TOR=LOSS")]
    pub lossy_tor: Vec<String>,
}

/// Flags of `hcclwatch simulate`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// A scenario file (TOML, or JSON for a `.json` name; schema in docs/simulation.md).
    /// Default: the built-in campaign, `scenarios/campaign.toml`. Repeatable: several
    /// files are run and pooled, as a batch.
    #[arg(long, value_name = "FILE", conflicts_with = "generate")]
    pub scenario: Vec<PathBuf>,
    /// Instead of a file, a random out-of-distribution held-out scenario drawn from this
    /// seed (at least 1000000, so that it never matches a shipped scenario's seed): every
    /// axis drawn from ranges that contain and exceed the shipped scenarios'.
    #[arg(long, value_name = "SEED", conflicts_with = "generate_in_sample")]
    pub generate: Option<u64>,
    /// Like --generate, from the older in-sample generator: ranges around the shipped
    /// scenarios' (new seeds of the same world), kept for comparisons.
    #[arg(
        long = "generate-in-sample",
        value_name = "SEED",
        conflicts_with = "scenario"
    )]
    pub generate_in_sample: Option<u64>,
    /// With --generate: the NPU ports' own congestion counters see part of the device
    /// plane's congestion too (each process's signal drawn from 0 to 1, from a stream of
    /// its own: the same scenarios otherwise). Without it the generated ports' counters
    /// see none of it.
    #[arg(long = "device-counters", requires = "generate")]
    pub device_counters: bool,
    /// Run N scenarios and pool them: N generated ones from the --generate (or
    /// --generate-in-sample) seed up, else
    /// the scenario with N seeds from its own (or --seed) up. Prints one line per run and
    /// the pooled report (time targets are judged on the pooled episodes).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub batch: Option<u64>,
    /// Print the scenario (after the overrides below) as TOML and exit.
    #[arg(long = "print-scenario")]
    pub print_scenario: bool,
    /// Override the scenario's nodes (4..=10000).
    #[arg(long)]
    pub nodes: Option<usize>,
    /// Override the scenario's length, in hours.
    #[arg(long)]
    pub hours: Option<f64>,
    /// Override the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Turn the scenario's congestion processes off.
    #[arg(long = "no-congestion")]
    pub no_congestion: bool,
    /// Override the members per probe group, as the daemon's `probe.max_group_size`
    /// (2..=1024).
    #[arg(long = "group-size")]
    pub group_size: Option<usize>,
    /// Take the engine thresholds from this config file's `[health]` section (and its
    /// `probe.interval`, unless --probe-interval is given).
    #[arg(long = "config.file", value_name = "PATH")]
    pub config_file: Option<PathBuf>,
    /// Run the world at this probe interval (e.g. `10s`, `30s`; default: the shipped
    /// `probe.interval`). A scenario written in rounds of another length is rescaled: the
    /// same world in wall-clock time, seen more or less often.
    #[arg(long = "probe-interval", value_name = "DURATION", value_parser = probe_interval)]
    pub probe_interval: Option<std::time::Duration>,
    /// Print JSON instead of the tables.
    #[arg(long)]
    pub json: bool,
}

/// `--probe-interval`: a duration as the configuration writes one, 100 ms to 1 h (the
/// range of a scenario's `round_seconds`).
fn probe_interval(s: &str) -> Result<std::time::Duration, String> {
    let d = hcclwatch::config::duration::parse(s).map_err(|e| e.to_string())?;
    if d < std::time::Duration::from_millis(100) || d > std::time::Duration::from_secs(3600) {
        return Err(format!("{s:?} is out of range 100ms..=1h"));
    }
    Ok(d)
}

/// Flags of `hcclwatch bench`, as in hccl_test and nccl-tests.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// all_reduce | all_gather | reduce_scatter | broadcast | reduce | all_to_all | sendrecv | p2p
    pub op: String,
    /// Start N local ranks as processes talking over TCP on 127.0.0.1.
    #[arg(long, value_name = "N", conflicts_with_all = ["rank", "world", "root", "rank_table", "config_file"])]
    pub ranks: Option<usize>,
    /// This process's rank (multi-host mode).
    #[arg(long)]
    pub rank: Option<usize>,
    /// Number of ranks (with --root).
    #[arg(long)]
    pub world: Option<usize>,
    /// Root info (hcclwatch-root://IP:PORT/ID) or IP:PORT; rank 0 serves it.
    #[arg(long)]
    pub root: Option<String>,
    /// HCCL rank-table file (also RANK_TABLE_FILE).
    #[arg(long = "rank-table", env = "RANK_TABLE_FILE")]
    pub rank_table: Option<std::path::PathBuf>,
    /// Config file whose `[collective]` section lists the peers (static bootstrap).
    #[arg(long = "config.file", value_name = "PATH", conflicts_with_all = ["ranks", "root", "rank_table"])]
    pub config_file: Option<std::path::PathBuf>,
    /// File holding the shared authentication key (required across hosts).
    #[arg(long = "key-file")]
    pub key_file: Option<std::path::PathBuf>,
    /// Minimum size in bytes (K/M/G suffixes, 1024-based).
    #[arg(short = 'b', long = "minbytes", default_value = "32M")]
    pub min_bytes: String,
    /// Maximum size in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "32M")]
    pub max_bytes: String,
    /// Multiplicative size step.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 0)]
    pub step_factor: usize,
    /// Additive size step in bytes.
    #[arg(short = 'i', long = "stepbytes", default_value = "0")]
    pub step_bytes: String,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: usize,
    /// Check results against a reference: 0 off, 1 on.
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u8,
    /// Reduction: sum, prod, max, min.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub redop: String,
    /// Data type: int8 … uint64, fp16, bfp16, fp32, fp64.
    #[arg(short = 'd', long = "datatype", default_value = "fp32")]
    pub dtype: String,
    /// Root rank for broadcast and reduce.
    #[arg(short = 'r', long = "root-rank", default_value_t = 0)]
    pub root_rank: usize,
    /// With --ranks: `core` binds rank i to the i-th CPU this process may use when there
    /// are no more ranks than CPUs (mpirun's default for 2 ranks; two ranks left to share
    /// a core run at about half speed), `none` leaves placement to the scheduler.
    #[arg(long = "bind-to", default_value = "core", value_parser = ["core", "none"])]
    pub bind_to: String,
    /// Set by --ranks for each rank it starts: the CPU this rank binds itself to before it
    /// starts any thread.
    #[arg(long = "bind-cpu", hide = true)]
    pub bind_cpu: Option<usize>,
    /// Connections per peer (default: 4).
    #[arg(long)]
    pub channels: Option<usize>,
    /// Bind outgoing connections to this interface (SO_BINDTODEVICE, needs root).
    #[arg(long = "bind-device", value_name = "IFACE")]
    pub bind_device: Option<String>,
    /// Payload bytes per frame (K/M suffixes).
    #[arg(long = "chunk-bytes", default_value = "512K")]
    pub chunk_bytes: String,
    /// Bytes per slice of a large ring or halving-doubling all-reduce (K/M suffixes;
    /// default: 4M divided by the local ranks per CPU, at least 1M).
    #[arg(long = "slice-bytes")]
    pub slice_bytes: Option<String>,
    /// SO_SNDBUF/SO_RCVBUF request (the kernel caps it at net.core.[wr]mem_max × 2).
    #[arg(long = "socket-buffer", default_value = "4M")]
    pub socket_buffer: String,
    /// HCCL_ALGO-style override (also read from HCCL_ALGO).
    #[arg(long, env = "HCCL_ALGO")]
    pub algo: Option<String>,
    /// Tag the measured payloads too (as `collective.authenticate_payloads` does for the
    /// daemon's probes), to measure what payload authentication costs; control frames
    /// are tagged either way.
    #[arg(long = "authenticate-payloads")]
    pub authenticate_payloads: bool,
    /// Print one JSON object per size instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write a Chrome trace of rank 0's operations.
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<std::path::PathBuf>,
    /// Write a chart of busbw against size (log axis), one line per op and algorithm: SVG
    /// or PNG, by the file's extension.
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    pub plot: Option<std::path::PathBuf>,
}

/// Flags of `hcclwatch run`. Flags override the config file and the environment.
#[derive(Debug, Clone, clap::Args)]
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
    /// Prometheus exporter-toolkit web config file (TLS, client CA, basic auth).
    #[arg(long = "web.config.file", value_name = "PATH")]
    pub web_config_file: Option<String>,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long = "log.level", value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log format.
    #[arg(long = "log.format", value_name = "FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Device backend: auto, dcmi, sim, none.
    #[arg(long = "telemetry.backend", value_name = "BACKEND", value_enum)]
    pub backend: Option<Backend>,
    /// Also export every reading under Huawei npu-exporter's metric names, labels and
    /// units (config key compat.npu_exporter).
    #[arg(long = "compat.npu-exporter")]
    pub compat_npu_exporter: bool,
}

impl RunArgs {
    /// The flags as (config key, flag name, value), for applying over the config.
    pub fn overrides(&self) -> Vec<(&'static str, &'static str, String)> {
        let mut v = Vec::new();
        let format = self.log_format.map(|f| f.as_str().to_string());
        let backend = self.backend.map(|b| b.as_str().to_string());
        let pairs: [(&str, &str, &Option<String>); 6] = [
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
            (
                "web.config_file",
                "--web.config.file",
                &self.web_config_file,
            ),
            ("log.level", "--log.level", &self.log_level),
            ("log.format", "--log.format", &format),
            ("telemetry.backend", "--telemetry.backend", &backend),
        ];
        for (key, flag, value) in pairs {
            if let Some(value) = value {
                v.push((key, flag, value.clone()));
            }
        }
        // A switch: present turns it on; absent leaves the file's (or env's) value.
        if self.compat_npu_exporter {
            v.push((
                "compat.npu_exporter",
                "--compat.npu-exporter",
                "true".to_string(),
            ));
        }
        v
    }
}
