//! fake-hccn: a test double of Ascend's `hccn_tool` for 910B (A2) and 910_93 (A3).
//!
//! It implements the tool's argv grammar, output strings, stdout/stderr split and exit
//! statuses as hcclwatch's documentation sets them out, for the commands hcclwatch runs
//! (`-link`, `-speed`, `-link_stat`, `-net_health`, `-ip`, `-vnic`, `-optical`, `-stat`,
//! `-ping`, and `-hccs_ping` as far as boards without HCCS refuse it). Values come from a
//! node scenario (`FAKE_HCCN_SCENARIO`), pings from a fabric file shared by every fake
//! node of a test (`FAKE_FABRIC`); both are read on every run. Every run appends its
//! argv to `FAKE_HCCN_LOG` when set. See README.md for the formats.

mod fabric;
mod output;
mod scenario;

use std::io::Write;
use std::time::Duration;

use scenario::{Behaviour, Mode, Npu, Scenario};

/// What a run prints and how it exits.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Exit status.
    pub code: i32,
}

impl Outcome {
    fn ok(stdout: String) -> Self {
        Outcome {
            stdout,
            ..Outcome::default()
        }
    }

    fn out(line: &str, code: i32) -> Self {
        Outcome {
            stdout: format!("{line}\n"),
            code,
            ..Outcome::default()
        }
    }

    fn err(line: &str, code: i32) -> Self {
        Outcome {
            stderr: format!("{line}\n"),
            code,
            ..Outcome::default()
        }
    }
}

const MORE: &str = "Enter [ hccn_tool -h ] for more details.";

/// The major commands this fake knows, with their one-line help.
const COMMANDS: &[(&str, &str)] = &[
    ("-link", "-g : get link status"),
    ("-speed", "-g : get link speed"),
    ("-link_stat", "-g : get link statistics"),
    ("-net_health", "-g : get net health status"),
    ("-ip", "-g : get ip address and netmask"),
    ("-vnic", "-g : get vnic status and ip address"),
    ("-optical", "-g : get optical module information"),
    ("-stat", "-g : get packet statistics"),
    (
        "-ping",
        "[-inet6] -g address <ipv4> | ipv6_address <ipv6> [pkt <bytes>] : ping cfg, pkt %d : the packet data length, [0 ~ 65507]",
    ),
    (
        "-hccs_ping",
        "-g address <vnic ipv4> | sdid <u32> [pkt <1792~3000>] [cnt <1~1000>] [interval <0~10>] [timeout <1~20000>]",
    ),
];

fn help() -> Outcome {
    let mut s = String::new();
    for (cmd, text) in COMMANDS {
        s.push_str(&format!("hccn_tool -i devid {cmd}\n    {text}\n"));
    }
    Outcome::ok(s)
}

/// A parameter error: the message on stderr, then the command's parameter list on stdout.
pub fn param_error(cmd: &str, message: &str, code: i32) -> Outcome {
    let text = COMMANDS
        .iter()
        .find(|(c, _)| *c == cmd)
        .map_or("", |(_, t)| t);
    Outcome {
        stdout: format!(
            "[ hccn_tool -i devid {cmd} ] needs the following parameters:\n    {text}\n"
        ),
        stderr: format!("{message}\n"),
        code,
    }
}

/// Checks the argv up to the device id, in the tool's order: argument count and length,
/// `-i`/`-a`, the major command at argv[3], then the id (1-2 digits, a known phy id).
fn front<'a>(args: &'a [String], scen: &'a Scenario) -> Result<(&'a str, &'a Npu), Outcome> {
    let argc = args.len() + 1;
    if !(2..64).contains(&argc) {
        return Err(Outcome {
            stderr: format!("Get invalid major cmd number. Please check your input.\n{MORE}\n"),
            code: 2,
            ..Outcome::default()
        });
    }
    if args.iter().any(|a| a.len() > 900) {
        return Err(Outcome::err("Get invalid input param len.", 5));
    }
    if args[0] != "-i" && args[0] != "-a" {
        return Err(Outcome {
            stderr: format!(
                "Get invalid major cmd type. The valid major cmd type should be \"-a\" or \"-i\".\n{MORE}\n"
            ),
            code: 1,
            ..Outcome::default()
        });
    }
    let invalid_major = || Outcome {
        stderr: format!("Get invalid major cmd.\n{MORE}\n"),
        code: 3,
        ..Outcome::default()
    };
    let Some(cmd) = args
        .get(2)
        .filter(|c| COMMANDS.iter().any(|(k, _)| k == *c))
    else {
        return Err(invalid_major());
    };
    if args[0] == "-a" {
        return Err(invalid_major());
    }
    let id = &args[1];
    let npu = (1..=2)
        .contains(&id.len())
        .then_some(id)
        .filter(|id| id.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|id| id.parse::<u32>().ok())
        .and_then(|phy| scen.npus.iter().find(|n| n.phy_id == phy))
        .ok_or_else(|| Outcome::err("Get invalid device id.", 4))?;
    Ok((cmd.as_str(), npu))
}

/// The outcome a configured behaviour forces, or `None` to answer normally.
fn forced(b: &Behaviour, scen: &Scenario) -> Option<Outcome> {
    if let Some(ms) = b.delay_ms {
        std::thread::sleep(Duration::from_millis(ms));
    }
    Some(match b.mode? {
        Mode::Busy => Outcome::out("hccn_tool is busy, please try again.", 11),
        Mode::LockFailed => Outcome::err("Get lock failed. Please try again.", 25),
        Mode::Occupied => Outcome::err("The device is occupied. Please try again later.", 31),
        Mode::NotSupported => Outcome::out("The command is not supported on this product.", 13),
        Mode::Fail => Outcome::err("Command execute failed!", 1),
        Mode::LinkDown => Outcome::err("Execute failed: Link status is down.", 22),
        Mode::NotReady => {
            std::thread::sleep(Duration::from_millis(scen.not_ready_delay_ms));
            Outcome::err("Get device health status failed!", 3)
        }
        Mode::Hang => {
            std::thread::sleep(Duration::from_millis(b.hang_ms.unwrap_or(3_600_000)));
            Outcome::err("Command execute failed!", 1)
        }
        Mode::Flood => Outcome::ok(flood(b.flood_bytes.unwrap_or(1 << 20))),
    })
}

/// At least `bytes` bytes of 64-byte lines.
fn flood(bytes: usize) -> String {
    let line = format!("{}\n", "x".repeat(63));
    line.repeat(bytes / line.len() + 1)
}

/// Runs one invocation against the scenario; `seen` is how many times this exact argv
/// has run, this run included (from the log), for behaviours limited to the first runs.
fn run(args: &[String], scen: &Scenario, seen: usize) -> Outcome {
    if args.len() == 1 && (args[0] == "-h" || args[0] == "--help") {
        return help();
    }
    let (cmd, npu) = match front(args, scen) {
        Ok(x) => x,
        Err(o) => return o,
    };
    if npu.not_ready {
        std::thread::sleep(Duration::from_millis(scen.not_ready_delay_ms));
        return Outcome::err("Get device health status failed!", 3);
    }
    let name = cmd.trim_start_matches('-');
    for b in [npu.behaviours.get(name), scen.behaviours.get(name)]
        .into_iter()
        .flatten()
    {
        if b.times.is_none_or(|t| seen <= t)
            && let Some(o) = forced(b, scen)
        {
            return o;
        }
    }
    if let Some(ms) = npu.delay_ms.or(scen.delay_ms) {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let sub = &args[3..];
    match cmd {
        "-ping" => fabric::ping(npu, scen, sub),
        "-hccs_ping" => fabric::hccs_ping(npu, scen, sub),
        _ => output::query(cmd, npu, scen, sub),
    }
}

/// Appends this run's argv to the log and returns how many lines equal to it the log
/// now holds (1 without a log).
fn log(args: &[String]) -> usize {
    let Some(path) = std::env::var_os("FAKE_HCCN_LOG") else {
        return 1;
    };
    let line = args.join(" ");
    // One write of a short line with O_APPEND: concurrent runs never interleave.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
    std::fs::read_to_string(&path)
        .map(|t| t.lines().filter(|l| *l == line).count())
        .unwrap_or(1)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seen = log(&args);
    let outcome = match Scenario::load() {
        Ok(scen) => run(&args, &scen, seen),
        Err(e) => Outcome {
            stderr: format!("fake-hccn: {e}\nCommand execute failed!\n"),
            code: 1,
            ..Outcome::default()
        },
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(outcome.stdout.as_bytes());
    let _ = out.flush();
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(outcome.stderr.as_bytes());
    let _ = err.flush();
    std::process::exit(outcome.code);
}
