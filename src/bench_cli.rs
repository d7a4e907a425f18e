//! The process side of `hcclwatch bench`: parse flags, bootstrap the communicator
//! (local launcher, root info or rank table), run the sweep, print on rank 0.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use hcclwatch::bench::{self, BenchOp, BenchOptions};
use hcclwatch::collective::algo::select::parse_hccl_algo;
use hcclwatch::collective::bootstrap::{env as henv, ranktable, rootinfo};
use hcclwatch::collective::transport::TransportConfig;
use hcclwatch::collective::{CommConfig, Communicator, DataType, ReduceOp};
use hcclwatch::config::types::RankSpec;

use crate::cli::BenchArgs;

/// Environment variable carrying the key from the local launcher to its ranks.
const KEY_ENV: &str = "HCCLBENCH_AUTH_KEY";

/// Parses `64`, `8K`, `32M`, `1G` (1024-based, as hccl_test).
pub fn parse_size(s: &str) -> anyhow::Result<usize> {
    let s = s.trim();
    let (num, mult) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&s[..s.len() - 1], 1usize << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: usize = num
        .parse()
        .with_context(|| format!("size {s:?} is not a number with an optional K/M/G suffix"))?;
    n.checked_mul(mult)
        .with_context(|| format!("size {s:?} is too large"))
}

fn options(a: &BenchArgs) -> anyhow::Result<BenchOptions> {
    let op = BenchOp::parse(&a.op).with_context(|| {
        format!("unknown operation {:?}; use all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all or sendrecv", a.op)
    })?;
    let o = BenchOptions {
        op,
        min_bytes: parse_size(&a.min_bytes).context("-b")?,
        max_bytes: parse_size(&a.max_bytes).context("-e")?,
        step_factor: a.step_factor,
        step_bytes: parse_size(&a.step_bytes).context("-i")?,
        iters: a.iters,
        warmup: a.warmup,
        check: a.check != 0,
        redop: ReduceOp::parse(&a.redop)
            .with_context(|| format!("-o {:?}: use sum, prod, max or min", a.redop))?,
        dtype: DataType::parse(&a.dtype)
            .with_context(|| format!("-d {:?}: unknown data type", a.dtype))?,
        root: a.root_rank,
    };
    if o.min_bytes > o.max_bytes {
        bail!("-b {} is larger than -e {}", o.min_bytes, o.max_bytes);
    }
    Ok(o)
}

fn env_map() -> HashMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("HCCL_"))
        .collect()
}

fn random_key() -> anyhow::Result<Vec<u8>> {
    Ok(hcclwatch::collective::transport::auth::nonce()?.to_vec())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> anyhow::Result<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        bail!("{KEY_ENV} is not hex");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16).with_context(|| format!("{KEY_ENV} is not hex"))
        })
        .collect()
}

fn load_key(a: &BenchArgs) -> anyhow::Result<Vec<u8>> {
    if let Some(p) = &a.key_file {
        // The same rules as the daemon's collective.key_file: a regular file, one token.
        let k = hcclwatch::config::file::read_key(p)
            .with_context(|| format!("reading key file {}", p.display()))?;
        return Ok(k.bytes);
    }
    if let Ok(h) = std::env::var(KEY_ENV) {
        return unhex(&h);
    }
    bail!("a shared key is required across hosts: pass --key-file (the same file on every rank)")
}

fn comm_config(
    a: &BenchArgs,
    comm_id: u64,
    key: Vec<u8>,
    env: &HashMap<String, String>,
) -> anyhow::Result<CommConfig> {
    let mut t = TransportConfig::new(comm_id, key);
    if let Some(ch) = a.channels {
        t.channels = ch;
    }
    t.bind_device = a.bind_device.clone();
    t.chunk_bytes = parse_size(&a.chunk_bytes).context("--chunk-bytes")?.max(1);
    t.socket_buffer = parse_size(&a.socket_buffer).context("--socket-buffer")?;
    t.connect_timeout = henv::connect_timeout(env).map_err(anyhow::Error::msg)?;
    t.traffic_class = henv::traffic_class(env).map_err(anyhow::Error::msg)?;
    t.authenticate_payloads = a.authenticate_payloads;
    let mut c = CommConfig::new(t);
    c.exec_timeout = henv::exec_timeout(env).map_err(anyhow::Error::msg)?;
    if let Some(s) = &a.slice_bytes {
        c.slice_bytes = Some(parse_size(s).context("--slice-bytes")?.max(1));
    }
    if let Some(algo) = &a.algo {
        c.algo = parse_hccl_algo(algo).map_err(|e| anyhow::anyhow!("HCCL_ALGO={algo:?}: {e}"))?;
    }
    Ok(c)
}

/// Entry point of `hcclwatch bench`.
pub fn main(a: BenchArgs) -> ExitCode {
    match run(a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hcclwatch bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: BenchArgs) -> anyhow::Result<ExitCode> {
    // First, so that every thread this rank starts inherits the binding.
    if let Some(cpu) = a.bind_cpu {
        bind_to_cpu(cpu)?;
    }
    let o = options(&a)?;
    if let Some(p) = &a.plot
        && !matches!(p.extension().and_then(|e| e.to_str()), Some("svg" | "png"))
    {
        bail!(
            "--plot {}: name the file *.svg or *.png (the format follows the extension)",
            p.display()
        );
    }
    if let Some(n) = a.ranks {
        return launch_local(n, a.bind_to == "core");
    }
    let env = env_map();
    if let Some(path) = &a.config_file {
        return run_static(&a, &o, path, &env);
    }
    let rank = a
        .rank
        .context("give --ranks N, or --rank with --root/--world, --rank-table or --config.file")?;
    let key = load_key(&a)?;
    let (comm, world) = if let Some(table) = &a.rank_table {
        let text =
            hcclwatch::config::file::read_text(table, hcclwatch::config::file::RANK_TABLE_LIMIT)
                .with_context(|| format!("reading rank table {}", table.display()))?;
        let t = ranktable::parse(&text)
            .map_err(|e| anyhow::anyhow!("rank table {}: {e}", table.display()))?;
        let addrs = t
            .addresses(henv::base_port(&env).map_err(anyhow::Error::msg)?)
            .map_err(|e| anyhow::anyhow!("rank table {}: {e}", table.display()))?;
        let me = *addrs.get(rank).with_context(|| {
            format!(
                "--rank {rank} is not in the rank table ({} ranks)",
                addrs.len()
            )
        })?;
        let listener = TcpListener::bind(me).with_context(|| format!("listening on {me}"))?;
        let id = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let n = addrs.len();
        (
            Communicator::init(listener, rank, addrs, comm_config(&a, id, key, &env)?)?,
            n,
        )
    } else {
        let world = a.world.context("--world is required with --root")?;
        let root_s = a
            .root
            .as_deref()
            .context("--root is required (or --rank-table)")?;
        let root: rootinfo::RootInfo = root_s
            .parse()
            .or_else(|_| {
                root_s
                    .parse::<SocketAddr>()
                    .map(|addr| rootinfo::RootInfo { addr, comm_id: 1 })
            })
            .map_err(|_| anyhow::anyhow!("--root {root_s:?} is neither root info nor IP:PORT"))?;
        let timeout = henv::connect_timeout(&env).map_err(anyhow::Error::msg)?;
        let server = if rank == 0 {
            let l = TcpListener::bind(root.addr)
                .with_context(|| format!("root: listening on {}", root.addr))?;
            Some(rootinfo::serve(
                l,
                world,
                root.comm_id,
                key.clone(),
                timeout,
            ))
        } else {
            None
        };
        let ip: IpAddr = if root.addr.ip().is_loopback() {
            root.addr.ip()
        } else {
            henv::root_ip(&env, &henv::interfaces()).map_err(anyhow::Error::msg)?
        };
        let listener = TcpListener::bind((ip, 0)).with_context(|| format!("listening on {ip}"))?;
        let me = listener.local_addr()?;
        let addrs = rootinfo::join(&root, rank, world, me, &key, timeout)?;
        if let Some(s) = server {
            s.join()
                .map_err(|_| anyhow::anyhow!("root store panicked"))??;
        }
        (
            Communicator::init(
                listener,
                rank,
                addrs,
                comm_config(&a, root.comm_id, key, &env)?,
            )?,
            world,
        )
    };
    finish(&a, &o, comm, rank, world)
}

/// Static bootstrap from a config file's `[collective]` section.
fn run_static(
    a: &BenchArgs,
    o: &BenchOptions,
    path: &std::path::Path,
    env: &HashMap<String, String>,
) -> anyhow::Result<ExitCode> {
    let cfg = match hcclwatch::config::load(Some(path), &[]) {
        Ok(c) => c.collective,
        Err(hcclwatch::config::ConfigError::Invalid(p)) => {
            bail!(
                "{}",
                p.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        }
        Err(e) => return Err(e.into()),
    };
    if cfg.peers.is_empty() {
        bail!(
            "{}: collective.peers is empty; list every member's IP:port",
            path.display()
        );
    }
    let addrs: Vec<SocketAddr> = cfg.peer_addrs();
    let rank = match (a.rank, cfg.rank) {
        (Some(r), _) => r,
        (None, RankSpec::Fixed(r)) => usize::from(r),
        (None, RankSpec::Auto) => {
            let local: Vec<IpAddr> = henv::interfaces().into_iter().map(|i| i.addr).collect();
            let mine: Vec<usize> = (0..addrs.len())
                .filter(|i| local.contains(&addrs[*i].ip()))
                .collect();
            match mine.as_slice() {
                [one] => *one,
                [] => bail!(
                    "no address in collective.peers belongs to this host; set collective.rank or --rank"
                ),
                _ => bail!(
                    "several addresses in collective.peers belong to this host ({mine:?}); set collective.rank or --rank"
                ),
            }
        }
    };
    let me = *addrs.get(rank).with_context(|| {
        format!(
            "rank {rank} is outside collective.peers ({} members)",
            addrs.len()
        )
    })?;
    let key_path = cfg
        .key_file
        .as_ref()
        .or(a.key_file.as_ref())
        .context("collective.key_file (or --key-file) is required")?;
    let mut args = a.clone();
    args.key_file = Some(key_path.clone());
    let key = load_key(&args)?;
    let mut c = comm_config(&args, 0x5717_1c00 ^ addrs.len() as u64, key, env)?;
    c.transport.channels = cfg.channels as usize;
    c.transport.connect_timeout = cfg.connect_timeout;
    c.exec_timeout = cfg.exec_timeout;
    if let Some(algo) = &cfg.algo {
        c.algo = algo.plan().clone();
    }
    if let Some(tc) = cfg.traffic_class {
        c.transport.traffic_class = Some(tc.tos());
    }
    if cfg.bind_device.is_some() {
        c.transport.bind_device = cfg.bind_device.clone();
    }
    let listener = TcpListener::bind(me).with_context(|| format!("listening on {me}"))?;
    let n = addrs.len();
    let comm = Communicator::init(listener, rank, addrs, c)?;
    finish(a, o, comm, rank, n)
}

fn finish(
    a: &BenchArgs,
    o: &BenchOptions,
    comm: Communicator,
    rank: usize,
    world: usize,
) -> anyhow::Result<ExitCode> {
    let mut comm = comm;
    if o.root >= world {
        bail!("-r {} is outside a world of {world}", o.root);
    }
    let show_progress = rank == 0 && std::io::stderr().is_terminal();
    let rows = bench::run(&mut comm, o, |done, total| {
        if show_progress {
            let w = 30;
            let filled = done * w / total.max(1);
            eprint!(
                "\r[{}{}] {done}/{total} sizes",
                "#".repeat(filled),
                " ".repeat(w - filled)
            );
            if done == total {
                eprintln!();
            }
        }
    })?;
    // Every rank's timeline goes to rank 0, which writes one trace with a track per rank.
    let traces = match &a.timeline {
        Some(_) => Some(gather_traces(&mut comm)?),
        None => None,
    };
    if rank == 0 {
        let mut out = std::io::stdout().lock();
        if a.json {
            for r in &rows {
                writeln!(out, "{}", serde_json::to_string(r)?)?;
            }
        } else {
            let c = comm.costs();
            let header = format!(
                "hcclwatch bench {}: {world} ranks{}, {} {}, {} channels{}, alpha {:.1} us, beta {:.3} GB/s",
                o.op.name(),
                // Read back, so the line shows the binding in force, not the one asked for.
                match allowed_cpus()[..] {
                    [cpu] if a.bind_cpu.is_some() => format!(" (rank 0 bound to CPU {cpu})"),
                    _ => String::new(),
                },
                o.dtype.name(),
                if o.op.reduces() {
                    o.redop.name()
                } else {
                    "no reduction"
                },
                comm.channels(),
                if a.authenticate_payloads {
                    ", payloads authenticated"
                } else {
                    ""
                },
                c.alpha * 1e6,
                1.0 / c.beta / 1e9
            );
            write!(out, "{}", bench::table(&rows, &header))?;
        }
        if let (Some(p), Some(traces)) = (&a.timeline, &traces) {
            std::fs::write(
                p,
                serde_json::to_vec_pretty(&hcclwatch::collective::timeline::merge_traces(traces))?,
            )
            .with_context(|| format!("writing {}", p.display()))?;
        }
        if let Some(p) = &a.plot {
            let image = match p.extension().and_then(|e| e.to_str()) {
                Some("svg") => bench::svg(&rows)
                    .context("drawing the SVG plot")?
                    .into_bytes(),
                Some("png") => bench::png(&rows).context("drawing the PNG plot")?,
                _ => bail!("--plot writes SVG or PNG; name the file *.svg or *.png"),
            };
            std::fs::write(p, image).with_context(|| format!("writing {}", p.display()))?;
        }
    }
    let wrong: u64 = rows.iter().filter_map(|r| r.wrong).sum();
    Ok(if wrong == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// Every rank's Chrome trace, gathered to all (lengths first, then the documents padded
/// to the longest). Every rank must take part: `--timeline` goes to all of them.
fn gather_traces(comm: &mut Communicator) -> anyhow::Result<Vec<serde_json::Value>> {
    let mine = serde_json::to_vec(&comm.timeline().chrome_trace())?;
    let n = comm.size();
    let mut lens = vec![0u8; 8 * n];
    comm.all_gather(
        &(mine.len() as u64).to_le_bytes(),
        &mut lens,
        1,
        DataType::Uint64,
    )
    .context("gathering the ranks' timelines (give --timeline to every rank)")?;
    let lens: Vec<usize> = lens
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()) as usize)
        .collect();
    let max = lens.iter().copied().max().unwrap_or(0).max(1);
    let mut padded = mine;
    padded.resize(max, b' ');
    let mut all = vec![0u8; max * n];
    comm.all_gather(&padded, &mut all, max, DataType::Uint8)
        .context("gathering the ranks' timelines")?;
    all.chunks_exact(max)
        .zip(lens)
        .enumerate()
        .map(|(r, (doc, len))| {
            serde_json::from_slice(&doc[..len.min(max)])
                .with_context(|| format!("rank {r}'s timeline is not valid JSON"))
        })
        .collect()
}

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Binds this process (its calling thread, and every thread started after) to `cpu`.
fn bind_to_cpu(cpu: usize) -> anyhow::Result<()> {
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        bail!("--bind-cpu {cpu}: no such CPU");
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)
        .with_context(|| format!("--bind-cpu {cpu}: sched_setaffinity"))
}

/// `--ranks N`: start N rank processes on 127.0.0.1 joined through a root store. With
/// `bind`, and no more ranks than CPUs, rank i is bound to the i-th allowed CPU.
fn launch_local(n: usize, bind: bool) -> anyhow::Result<ExitCode> {
    if n == 0 || n > 64 {
        bail!("--ranks {n}: use 1..=64");
    }
    let key = random_key()?;
    let port = {
        let l = TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let root = rootinfo::RootInfo {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        comm_id: u64::from_le_bytes(key[..8].try_into()?),
    };
    let exe = std::env::current_exe()?;
    let mut base: Vec<String> = std::env::args().skip(1).collect();
    // Drop `--ranks N` / `--ranks=N` and pass the rank-specific flags instead.
    let mut i = 0;
    while i < base.len() {
        if base[i] == "--ranks" {
            base.drain(i..(i + 2).min(base.len()));
        } else if base[i].starts_with("--ranks=") {
            base.remove(i);
        } else {
            i += 1;
        }
    }
    let cpus = allowed_cpus();
    let bind = bind && n <= cpus.len();
    let mut children = Vec::new();
    for r in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.args(&base)
            .args([
                "--rank",
                &r.to_string(),
                "--world",
                &n.to_string(),
                "--root",
                &root.to_string(),
            ])
            .env(KEY_ENV, hex(&key));
        if let Some(cpu) = cpus.get(r).filter(|_| bind) {
            cmd.args(["--bind-cpu", &cpu.to_string()]);
        }
        if r != 0 {
            cmd.stdout(std::process::Stdio::null());
        }
        children.push((
            r,
            cmd.spawn().with_context(|| format!("starting rank {r}"))?,
        ));
    }
    let mut worst = ExitCode::SUCCESS;
    let mut failed = Vec::new();
    for (r, mut c) in children {
        let st = c.wait()?;
        if !st.success() {
            failed.push(format!("rank {r}: {st}"));
            worst = ExitCode::FAILURE;
        }
    }
    if !failed.is_empty() {
        eprintln!(
            "hcclwatch bench: {} of {n} ranks failed: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    Ok(worst)
}
