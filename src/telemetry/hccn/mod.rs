//! `hccn_tool`, Ascend's NPU network tool, as a well-behaved subprocess.
//!
//! Link state, speed, link history, optics and the RoCE ping have no DCMI call on
//! 910B/A3: only the tool (or its private driver channel) has them. [`Hccn`] runs it for
//! the port poller ([`poller`]) and for the device prober, with these guarantees:
//!
//! - **argv only**, never a shell, and an environment of only `PATH` and
//!   `LD_LIBRARY_PATH` (the tool links the driver's shared libraries);
//! - **a deadline per call** that kills the tool's whole process group: the tool waits
//!   up to about five minutes for a device that is not ready;
//! - **at most one call per NPU at a time**, and at most `max_in_flight` calls at once;
//!   a call that cannot get its turn within its deadline is not made
//!   ([`HccnError::QueueTimeout`]);
//! - **both output streams capped**; past the cap the call fails
//!   ([`HccnError::OutputTooLarge`]) rather than parsing half an answer;
//! - **busy answers** (`hccn_tool is busy`, `Get lock failed`, `The device is occupied`,
//!   `I2c is busy`) are retried a few times with a growing pause, within the deadline;
//! - **"not supported on this product"** is remembered per (command, NPU) and that pair
//!   is never run again;
//! - outcomes are read from the tool's **messages**, not only its exit status, because
//!   statuses collide ([`error::classify`]).
//!
//! Every run is counted in `hcclwatch_hccn_calls_total{command,result}` and timed in
//! `hcclwatch_hccn_call_duration_seconds{command}` (through [`Store::publish_hccn_calls`]).

pub(crate) mod conf;
pub(crate) mod error;
pub mod parse;
pub(crate) mod poller;
pub(crate) mod run;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use jiff::tz::TimeZone;

pub use self::error::HccnError;
use self::run::{Finished, Invocation, RunError};
use crate::snapshot::Store;
use crate::snapshot::histogram::Histogram;
use crate::snapshot::port::{HCCN_CALL_BUCKETS, HccnCallStats, LinkStat, Optics, PingReply};

/// Default path of the tool on Ascend hosts.
pub const DEFAULT_TOOL: &str = "/usr/local/Ascend/driver/tools/hccn_tool";

/// Bytes kept per output stream. The largest legitimate answer (`-optical -g`, about 60
/// lines; `-lldp -g` would be the longest) is a few KiB.
pub const OUTPUT_CAP: usize = 64 * 1024;

/// Busy answers retried within one call, after 100 ms, then 200 ms.
const BUSY_RETRIES: u32 = 2;
const BUSY_BACKOFF: Duration = Duration::from_millis(100);

/// The `hccn_tool` commands hcclwatch runs; all take `-i <phy>` first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Command {
    /// `-link -g`.
    Link,
    /// `-speed -g`.
    Speed,
    /// `-link_stat -g`.
    LinkStat,
    /// `-net_health -g`.
    NetHealth,
    /// `-ip -g`.
    Ip,
    /// `-vnic -g`.
    Vnic,
    /// `-optical -g`.
    Optical,
    /// `-stat -g`.
    Stat,
    /// `-ping -g address <ip>`.
    Ping,
}

impl Command {
    /// The `command` label value.
    pub fn label(self) -> &'static str {
        match self {
            Command::Link => "link",
            Command::Speed => "speed",
            Command::LinkStat => "link_stat",
            Command::NetHealth => "net_health",
            Command::Ip => "ip",
            Command::Vnic => "vnic",
            Command::Optical => "optical",
            Command::Stat => "stat",
            Command::Ping => "ping",
        }
    }

    /// The major command argument (`argv[3]`).
    fn flag(self) -> &'static str {
        match self {
            Command::Link => "-link",
            Command::Speed => "-speed",
            Command::LinkStat => "-link_stat",
            Command::NetHealth => "-net_health",
            Command::Ip => "-ip",
            Command::Vnic => "-vnic",
            Command::Optical => "-optical",
            Command::Stat => "-stat",
            Command::Ping => "-ping",
        }
    }
}

/// How to run the tool.
#[derive(Debug, Clone, PartialEq)]
pub struct HccnOptions {
    /// The tool's path.
    pub tool: PathBuf,
    /// Deadline of one query (`-g`) call, including waits for its turn and busy retries.
    pub call_deadline: Duration,
    /// Deadline of one ping call.
    pub ping_deadline: Duration,
    /// Calls allowed in flight at once, all NPUs together.
    pub max_in_flight: usize,
    /// The child's `PATH`.
    pub path: Option<String>,
    /// The child's `LD_LIBRARY_PATH`.
    pub ld_library_path: Option<String>,
}

impl Default for HccnOptions {
    fn default() -> Self {
        Self {
            tool: PathBuf::from(DEFAULT_TOOL),
            call_deadline: Duration::from_secs(15),
            ping_deadline: Duration::from_secs(10),
            max_in_flight: 8,
            path: None,
            ld_library_path: None,
        }
    }
}

/// The per-NPU locks and the in-flight bound, as one condition: a call may start when no
/// other call holds its NPU and fewer than `max` calls run.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<GateState>,
    cv: Condvar,
    max: usize,
}

#[derive(Debug, Default)]
struct GateState {
    busy: HashSet<u32>,
    in_flight: usize,
}

/// A call's turn; released on drop.
struct Turn<'a> {
    gate: &'a Gate,
    phy: u32,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `phy` is free and a slot is open, or until `until`.
    fn acquire(&self, phy: u32, until: Instant) -> Option<Turn<'_>> {
        let mut s = self.lock();
        loop {
            if !s.busy.contains(&phy) && s.in_flight < self.max {
                s.busy.insert(phy);
                s.in_flight += 1;
                return Some(Turn { gate: self, phy });
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            s = self
                .cv
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut s = self.gate.lock();
        s.busy.remove(&self.phy);
        s.in_flight -= 1;
        drop(s);
        self.gate.cv.notify_all();
    }
}

/// The tool, shared by every thread that calls it (`Arc<Hccn>`; all methods take
/// `&self`). See the module documentation for what each call guarantees.
#[derive(Debug)]
pub struct Hccn {
    opts: HccnOptions,
    env: Vec<(String, String)>,
    gate: Gate,
    unsupported: Mutex<BTreeSet<(Command, u32)>>,
    stats: Mutex<HccnCallStats>,
    running: Mutex<HashSet<u32>>,
    closed: AtomicBool,
    store: Option<Arc<Store>>,
    time_zone: TimeZone,
}

/// The time zone `hccn_tool` formats its timestamps in. The tool runs without `TZ`, so
/// the C library uses `/etc/localtime`, or UTC when that file is missing.
fn tool_time_zone() -> TimeZone {
    std::fs::read("/etc/localtime")
        .ok()
        .and_then(|b| TimeZone::tzif("localtime", &b).ok())
        .unwrap_or(TimeZone::UTC)
}

impl Hccn {
    /// A handle on the tool. Call statistics go to `store` after every call, when given.
    pub fn new(opts: HccnOptions, store: Option<Arc<Store>>) -> Self {
        let env = [
            ("PATH", &opts.path),
            ("LD_LIBRARY_PATH", &opts.ld_library_path),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k.to_string(), v.clone())))
        .collect();
        Self {
            gate: Gate {
                max: opts.max_in_flight.max(1),
                ..Gate::default()
            },
            env,
            opts,
            unsupported: Mutex::default(),
            stats: Mutex::default(),
            running: Mutex::default(),
            closed: AtomicBool::new(false),
            store,
            time_zone: tool_time_zone(),
        }
    }

    /// The tool's path.
    pub fn tool(&self) -> &Path {
        &self.opts.tool
    }

    /// Whether the tool exists and is an executable file.
    pub fn tool_is_executable(&self) -> bool {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&self.opts.tool)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }

    /// A copy of the call statistics.
    pub fn stats(&self) -> HccnCallStats {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Kills every running call's process group and refuses new calls: at daemon exit,
    /// a tool stuck on a device that is not ready would otherwise outlive the daemon (it
    /// runs in its own process group, so it gets no signal meant for the daemon's).
    pub fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        for pgid in running.iter() {
            if let Some(pid) = rustix::process::Pid::from_raw(*pgid as i32) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
        }
    }

    fn record(&self, cmd: Command, result: &'static str, took: Option<Duration>) {
        let snapshot = {
            let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
            *s.calls.entry((cmd.label(), result)).or_default() += 1;
            if let Some(t) = took {
                s.durations
                    .entry(cmd.label())
                    .or_insert_with(|| Histogram::new(HCCN_CALL_BUCKETS))
                    .observe(t.as_secs_f64());
            }
            s.clone()
        };
        if let Some(store) = &self.store {
            store.publish_hccn_calls(snapshot);
        }
    }

    fn mark_unsupported(&self, cmd: Command, phy: u32) {
        self.unsupported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((cmd, phy));
        let snapshot = {
            let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
            s.unsupported.insert((cmd.label(), phy));
            s.clone()
        };
        if let Some(store) = &self.store {
            store.publish_hccn_calls(snapshot);
        }
    }

    fn is_unsupported(&self, cmd: Command, phy: u32) -> bool {
        self.unsupported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(cmd, phy))
    }

    /// One run of the tool, with the process registered for [`Hccn::shutdown`].
    fn run_once(&self, args: &[String], left: Duration) -> Result<Finished, HccnError> {
        let inv = Invocation {
            tool: &self.opts.tool,
            args,
            env: &self.env,
            deadline: left,
            cap: OUTPUT_CAP,
            running: Some(&self.running),
            closed: Some(&self.closed),
        };
        run::run(&inv).map_err(|e| match e {
            RunError::Spawn(source) => HccnError::Spawn {
                path: self.opts.tool.display().to_string(),
                source,
            },
            RunError::Timeout => HccnError::Timeout(left),
            RunError::TooLarge(stream) => HccnError::OutputTooLarge {
                stream,
                cap: OUTPUT_CAP,
            },
        })
    }

    /// Runs `cmd` for `phy` with `args` after the command flag, and turns the finished
    /// run into a result with `decide`; the whole call, turn and retries included, stays
    /// within `deadline`.
    fn call<T>(
        &self,
        cmd: Command,
        phy: u32,
        args: &[&str],
        deadline: Duration,
        decide: impl Fn(&Finished) -> Result<T, HccnError>,
    ) -> Result<T, HccnError> {
        if self.is_unsupported(cmd, phy) {
            return Err(HccnError::NotSupported);
        }
        let until = Instant::now() + deadline;
        let Some(_turn) = self.gate.acquire(phy, until) else {
            self.record(cmd, "queue_timeout", None);
            return Err(HccnError::QueueTimeout(deadline));
        };
        let mut argv = vec!["-i".to_string(), phy.to_string(), cmd.flag().to_string()];
        argv.extend(args.iter().map(|a| (*a).to_string()));
        let mut attempt = 0;
        loop {
            if self.closed.load(Ordering::SeqCst) {
                return Err(HccnError::Failed {
                    exit: None,
                    message: "hcclwatch is shutting down".into(),
                });
            }
            let left = until.saturating_duration_since(Instant::now());
            let t0 = Instant::now();
            let outcome = self.run_once(&argv, left).and_then(|f| decide(&f));
            let took = t0.elapsed();
            self.record(
                cmd,
                outcome
                    .as_ref()
                    .map_or_else(HccnError::result_label, |_| "ok"),
                Some(took),
            );
            let pause = BUSY_BACKOFF * 2u32.pow(attempt);
            match outcome {
                Err(e)
                    if e.is_busy()
                        && attempt < BUSY_RETRIES
                        && until.saturating_duration_since(Instant::now()) > pause * 2 =>
                {
                    tracing::debug!(command = cmd.label(), npu = phy, error = %e, "hccn_tool busy; retrying");
                    std::thread::sleep(pause);
                    attempt += 1;
                }
                Err(HccnError::NotSupported) => {
                    tracing::info!(
                        command = cmd.label(),
                        npu = phy,
                        "hccn_tool: not supported on this product; not asked again"
                    );
                    self.mark_unsupported(cmd, phy);
                    return Err(HccnError::NotSupported);
                }
                other => return other,
            }
        }
    }

    /// A query: `-g`, the messages classified, then `parse` on stdout.
    fn query<T>(
        &self,
        cmd: Command,
        phy: u32,
        parse: impl Fn(&str) -> Result<T, HccnError>,
    ) -> Result<T, HccnError> {
        self.call(cmd, phy, &["-g"], self.opts.call_deadline, |f| {
            error::classify(f.exit, &f.stdout, &f.stderr)?;
            parse(&f.stdout)
        })
    }

    /// `-link -g`: whether the port's link is up.
    pub fn link(&self, phy: u32) -> Result<bool, HccnError> {
        self.query(Command::Link, phy, parse::link)
    }

    /// `-speed -g`: the port speed in bits/s, `None` when the tool says `Unknown!`.
    pub fn speed(&self, phy: u32) -> Result<Option<f64>, HccnError> {
        self.query(Command::Speed, phy, parse::speed)
    }

    /// `-link_stat -g`: link-up/down counts and the change history (times read in the
    /// zone the tool formats them in).
    pub fn link_stat(&self, phy: u32) -> Result<LinkStat, HccnError> {
        self.query(Command::LinkStat, phy, |t| {
            parse::link_stat(t, &self.time_zone)
        })
    }

    /// `-net_health -g`: the result code (DCMI numbering), `None` for `Unknown`.
    pub fn net_health(&self, phy: u32) -> Result<Option<u32>, HccnError> {
        self.query(Command::NetHealth, phy, parse::net_health)
    }

    /// `-ip -g`: the port's IPv4 addresses; [`HccnError::NoIp`] when none is set.
    pub fn ip(&self, phy: u32) -> Result<Vec<Ipv4Addr>, HccnError> {
        self.query(Command::Ip, phy, parse::ip)
    }

    /// `-vnic -g`: the A3 vNIC state and address.
    pub fn vnic(&self, phy: u32) -> Result<parse::Vnic, HccnError> {
        self.query(Command::Vnic, phy, parse::vnic)
    }

    /// `-optical -g`: the optical module. A missing module is a reading (`present`
    /// false), whether the tool prints `not present` or fails with `Optical module is
    /// not present.`
    pub fn optical(&self, phy: u32) -> Result<Optics, HccnError> {
        self.call(
            Command::Optical,
            phy,
            &["-g"],
            self.opts.call_deadline,
            |f| match error::classify(f.exit, &f.stdout, &f.stderr) {
                Err(HccnError::OpticalAbsent) => Ok(Optics::default()),
                Err(e) => Err(e),
                Ok(()) => parse::optical(&f.stdout),
            },
        )
    }

    /// `-stat -g`: every packet counter by the tool's key name.
    pub fn stat(&self, phy: u32) -> Result<BTreeMap<String, u64>, HccnError> {
        self.query(Command::Stat, phy, parse::stat)
    }

    /// Pings `address` from NPU `phy`'s RoCE port: `hccn_tool -i <phy> -ping -g address
    /// <address>`, three packets with the tool's default 4096-byte payload.
    ///
    /// Any thread may call this, for different NPUs at once; calls for the same NPU (and
    /// the port poller's reads of it) take turns, and at most `max_in_flight` calls run
    /// at once. The whole call, the wait for its turn included, ends within the
    /// configured ping deadline (`telemetry.hccn_ping_deadline`).
    ///
    /// A ping that lost packets is a successful measurement: the tool exits 1 with
    /// `Command execute failed!` whenever a packet is lost, but prints the full result,
    /// and this returns it (`received < sent`, lost packets `None` in `rtts`). Errors
    /// are only for pings that did not measure anything: the tool failed before sending
    /// (no IP configured, link down, device not ready), timed out, was busy, or the
    /// caller's turn did not come ([`HccnError::QueueTimeout`]).
    pub fn ping(&self, phy: u32, address: Ipv4Addr) -> Result<PingReply, HccnError> {
        let addr = address.to_string();
        self.call(
            Command::Ping,
            phy,
            &["-g", "address", &addr],
            self.opts.ping_deadline,
            |f| {
                if f.stdout.contains("packets transmitted") {
                    return parse::ping(&f.stdout);
                }
                error::classify(f.exit, &f.stdout, &f.stderr)?;
                parse::ping(&f.stdout)
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in tool: a shell script that answers each command from `answers`, logs
    /// its argv to `log`, and sleeps where asked.
    fn script(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join("hccn_tool");
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"$@\" >> {}/argv.log\n{body}\n",
                dir.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn hccn(tool: PathBuf, deadline: Duration) -> Hccn {
        Hccn::new(
            HccnOptions {
                tool,
                call_deadline: deadline,
                ping_deadline: deadline,
                max_in_flight: 4,
                path: Some("/usr/bin:/bin".into()),
                ld_library_path: None,
            },
            None,
        )
    }

    fn log_lines(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("argv.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn argv_is_the_documented_grammar() {
        let dir = tempfile::tempdir().unwrap();
        let tool = script(dir.path(), "echo 'link status: UP'");
        let h = hccn(tool, Duration::from_secs(5));
        assert!(h.link(3).unwrap());
        assert_eq!(log_lines(dir.path()), vec!["-i 3 -link -g"]);
        assert_eq!(h.stats().calls[&("link", "ok")], 1);
        assert_eq!(h.stats().durations["link"].count(), 1);
    }

    #[test]
    fn not_supported_is_asked_once() {
        let dir = tempfile::tempdir().unwrap();
        let tool = script(
            dir.path(),
            "echo 'The command is not supported on this product.'; exit 13",
        );
        let h = hccn(tool, Duration::from_secs(5));
        for _ in 0..3 {
            assert!(matches!(h.optical(0), Err(HccnError::NotSupported)));
        }
        assert_eq!(log_lines(dir.path()).len(), 1);
        // Another NPU is asked on its own.
        assert!(matches!(h.optical(1), Err(HccnError::NotSupported)));
        assert_eq!(log_lines(dir.path()).len(), 2);
        let s = h.stats();
        assert_eq!(s.calls[&("optical", "not_supported")], 2);
        assert!(s.unsupported.contains(&("optical", 0)));
    }

    #[test]
    fn busy_is_retried_then_reported() {
        let dir = tempfile::tempdir().unwrap();
        // Busy twice, then an answer: the call succeeds on its third run.
        let tool = script(
            dir.path(),
            &format!(
                "n=$(wc -l < {d}/argv.log)\nif [ \"$n\" -le 2 ]; then echo 'hccn_tool is busy, please try again.'; exit 11; fi\necho 'Speed: 100000 Mb/s'",
                d = dir.path().display()
            ),
        );
        let h = hccn(tool, Duration::from_secs(5));
        assert_eq!(h.speed(0).unwrap(), Some(100e9));
        let s = h.stats();
        assert_eq!(s.calls[&("speed", "busy")], 2);
        assert_eq!(s.calls[&("speed", "ok")], 1);
        // Always busy: three runs, then the error.
        let dir = tempfile::tempdir().unwrap();
        let tool = script(
            dir.path(),
            "echo 'Get lock failed. Please try again.' >&2; exit 25",
        );
        let h = hccn(tool, Duration::from_secs(5));
        assert!(matches!(h.speed(0), Err(HccnError::Busy(_))));
        assert_eq!(log_lines(dir.path()).len(), 3);
    }

    #[test]
    fn a_lossy_ping_is_a_measurement() {
        let dir = tempfile::tempdir().unwrap();
        let tool = script(
            dir.path(),
            "printf 'device 0 PING 10.0.0.2\\nrecv time out seq=0\\nrecv seq=1,time=0.100000ms\\nrecv seq=2,time=0.200000ms\\n3 packets transmitted, 2 received, 33.33%% packet loss\\n\\n'\necho 'Command execute failed!' >&2\nexit 1",
        );
        let h = hccn(tool, Duration::from_secs(5));
        let r = h.ping(0, Ipv4Addr::new(10, 0, 0, 2)).unwrap();
        assert_eq!((r.sent, r.received), (3, 2));
        assert_eq!(r.rtts[0], None);
        assert_eq!(
            log_lines(dir.path()),
            vec!["-i 0 -ping -g address 10.0.0.2"]
        );
        // Failing before sending anything is an error.
        let dir = tempfile::tempdir().unwrap();
        let tool = script(
            dir.path(),
            "echo 'Execute failed: Link status is down.' >&2; exit 22",
        );
        let h = hccn(tool, Duration::from_secs(5));
        assert!(matches!(
            h.ping(0, Ipv4Addr::new(10, 0, 0, 2)),
            Err(HccnError::LinkDown)
        ));
    }

    #[test]
    fn one_call_per_npu_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        // Each run records start and end; overlapping runs for one NPU would interleave.
        let tool = script(
            dir.path(),
            &format!(
                "echo start >> {d}/order.log; sleep 0.2; echo end >> {d}/order.log; echo 'link status: UP'",
                d = dir.path().display()
            ),
        );
        let h = Arc::new(hccn(tool, Duration::from_secs(10)));
        std::thread::scope(|s| {
            for _ in 0..3 {
                let h = h.clone();
                s.spawn(move || assert!(h.link(5).unwrap()));
            }
        });
        let order = std::fs::read_to_string(dir.path().join("order.log")).unwrap();
        assert_eq!(order, "start\nend\nstart\nend\nstart\nend\n");
    }

    #[test]
    fn a_call_that_cannot_get_its_turn_is_not_made() {
        let dir = tempfile::tempdir().unwrap();
        let tool = script(dir.path(), "echo 'link status: UP'");
        let h = hccn(tool, Duration::from_millis(200));
        // Another call holds NPU 0 for longer than this call's deadline.
        let held = h.gate.acquire(0, Instant::now()).unwrap();
        assert!(matches!(h.link(0), Err(HccnError::QueueTimeout(_))));
        // Other NPUs are not held up.
        assert!(h.link(1).unwrap());
        drop(held);
        assert!(h.link(0).unwrap());
        assert_eq!(
            log_lines(dir.path()),
            vec!["-i 1 -link -g", "-i 0 -link -g"]
        );
        let s = h.stats();
        assert_eq!(s.calls[&("link", "queue_timeout")], 1);
        assert_eq!(s.calls[&("link", "ok")], 2);
    }

    #[test]
    fn the_in_flight_bound_holds_across_npus() {
        let dir = tempfile::tempdir().unwrap();
        let tool = script(dir.path(), "echo 'link status: UP'");
        let mut opts = HccnOptions {
            tool,
            call_deadline: Duration::from_millis(200),
            max_in_flight: 2,
            ..HccnOptions::default()
        };
        opts.path = Some("/usr/bin:/bin".into());
        let h = Hccn::new(opts, None);
        let a = h.gate.acquire(0, Instant::now()).unwrap();
        let b = h.gate.acquire(1, Instant::now()).unwrap();
        assert!(matches!(h.link(2), Err(HccnError::QueueTimeout(_))));
        drop(a);
        assert!(h.link(2).unwrap());
        drop(b);
    }

    #[test]
    fn a_hung_tool_is_killed_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let tool = script(dir.path(), "sleep 30; echo 'link status: UP'");
        let h = hccn(tool, Duration::from_millis(300));
        let t0 = Instant::now();
        assert!(matches!(h.link(0), Err(HccnError::Timeout(_))));
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(h.running.lock().unwrap().is_empty());
        assert_eq!(h.stats().calls[&("link", "timeout")], 1);
    }

    #[test]
    fn shutdown_refuses_new_calls() {
        let dir = tempfile::tempdir().unwrap();
        let tool = script(dir.path(), "echo 'link status: UP'");
        let h = hccn(tool, Duration::from_secs(5));
        h.shutdown();
        assert!(h.link(0).is_err());
        assert!(log_lines(dir.path()).is_empty());
    }
}
