//! Runs `hccn_tool` once: argv only (no shell), a minimal environment, its own process
//! group, a deadline, and both output streams capped.
//!
//! The tool can block for about five minutes on a device that is not ready, and it may
//! start helpers of its own, so the child gets a process group of its own and the whole
//! group is killed when the deadline passes (and after every run, so no helper outlives
//! it). The tool itself is also killed when the daemon exits, however it exits (Linux's
//! parent-death signal), since a shutdown that never runs cannot kill the group.
//!
//! Each stream is read on its own thread; past the cap the reader stops and closes its
//! end of the pipe, which makes the tool's next write fail, and the run reports the
//! overflow instead of parsing half an answer.

use std::collections::HashSet;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use wait_timeout::ChildExt;

/// How long to wait for the readers after the process group is gone. They finish at once
/// unless a process that left the group still holds a pipe open.
const READER_GRACE: Duration = Duration::from_millis(500);

/// What a finished run printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// Exit status; `None` when a signal ended the tool.
    pub exit: Option<i32>,
    /// Standard output (lossily decoded).
    pub stdout: String,
    /// Standard error (lossily decoded).
    pub stderr: String,
}

/// Why a run has no [`Finished`] result.
#[derive(Debug)]
pub enum RunError {
    /// The tool could not be started.
    Spawn(std::io::Error),
    /// The deadline passed; the group was killed.
    Timeout,
    /// A stream went past the cap (`"stdout"` or `"stderr"`).
    TooLarge(&'static str),
}

/// How to run the tool.
#[derive(Debug, Clone)]
pub struct Invocation<'a> {
    /// The tool's path.
    pub tool: &'a Path,
    /// Arguments after the program name.
    pub args: &'a [String],
    /// The whole environment of the child.
    pub env: &'a [(String, String)],
    /// Time allowed for the run.
    pub deadline: Duration,
    /// Cap per stream, bytes.
    pub cap: usize,
    /// Where the running child's process group id is registered until it is reaped, so
    /// that a shutdown can kill it.
    pub running: Option<&'a Mutex<HashSet<u32>>>,
    /// Set when the owner shuts down: a child registered after that is killed at once,
    /// so a shutdown racing with a spawn leaves nothing behind.
    pub closed: Option<&'a AtomicBool>,
}

/// Reads `r` until EOF or until more than `cap` bytes came; returns the bytes (at most
/// `cap`) and whether the cap was passed. Dropping `r` at the cap closes the pipe.
fn read_capped(mut r: impl Read, cap: usize) -> (Vec<u8>, bool) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk) {
            Ok(0) => return (buf, false),
            Ok(n) => {
                if buf.len() + n > cap {
                    let room = cap - buf.len();
                    buf.extend_from_slice(&chunk[..room]);
                    return (buf, true);
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return (buf, false),
        }
    }
}

/// Kills the child's whole process group. The group id is the child's pid (it leads its
/// own group). Before the child is reaped, and while any member of the group lives, no
/// other group can have that id, so this signals only the tool and its helpers. After a
/// normal exit the group is either still there (helpers, which this kills) or gone ("no
/// such process", ignored); another group taking the id in between would need the pid
/// counter to wrap around within microseconds and a new group leader, not a practical
/// risk.
fn kill_group(pgid: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// One stream's bytes as its reader thread hands them over: the stream's name, what was
/// read (at most the cap), and whether there was more.
type Chunk = (&'static str, Vec<u8>, bool);

/// Starts a reader thread for each of the child's captured streams. Each sends one
/// [`Chunk`] when its stream ends; the receiver sees the channel close once both are done.
fn spawn_readers(child: &mut std::process::Child, cap: usize) -> mpsc::Receiver<Chunk> {
    let (tx, rx) = mpsc::channel::<Chunk>();
    let streams: [(&'static str, Option<Box<dyn Read + Send>>); 2] = [
        (
            "stdout",
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ),
        (
            "stderr",
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ),
    ];
    for (name, stream) in streams {
        let tx = tx.clone();
        let Some(stream) = stream else { continue };
        // A reader that cannot start leaves its stream empty; the run still ends by its
        // deadline, so nothing blocks on it.
        let _ = std::thread::Builder::new()
            .name("hcclwatch-hccn-io".into())
            .spawn(move || {
                let (bytes, over) = read_capped(stream, cap);
                let _ = tx.send((name, bytes, over));
            });
    }
    drop(tx);
    rx
}

/// What the readers delivered within the grace period after the run ended.
struct Output {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// The stream that went over the cap, if one did.
    over: Option<&'static str>,
}

/// Takes both streams from the readers, waiting at most [`READER_GRACE`] for them: a
/// reader still blocked after the group was killed leaves its stream empty.
fn collect_output(rx: &mpsc::Receiver<Chunk>) -> Output {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut over = None;
    let grace_until = Instant::now() + READER_GRACE;
    for _ in 0..2 {
        let left = grace_until.saturating_duration_since(Instant::now());
        let Ok((name, bytes, too_large)) = rx.recv_timeout(left) else {
            break;
        };
        if too_large {
            over = Some(name);
        }
        if name == "stdout" {
            stdout = bytes;
        } else {
            stderr = bytes;
        }
    }
    Output {
        stdout,
        stderr,
        over,
    }
}

/// Runs the tool once, as described in the module documentation.
pub fn run(inv: &Invocation<'_>) -> Result<Finished, RunError> {
    let mut cmd = Command::new(inv.tool);
    cmd.args(inv.args)
        .env_clear()
        .envs(inv.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    crate::telemetry::dcmi::kill_when_parent_exits(&mut cmd);
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(RunError::Spawn)?;
    let pid = child.id();
    let register = |add: bool| {
        if let Some(r) = inv.running {
            let mut set = r.lock().unwrap_or_else(|p| p.into_inner());
            if add {
                set.insert(pid);
                // Checked under the lock the shutdown takes after setting the flag: either
                // the shutdown sees this child, or this sees the flag.
                if inv.closed.is_some_and(|c| c.load(Ordering::SeqCst)) {
                    kill_group(pid);
                }
            } else {
                set.remove(&pid);
            }
        }
    };
    register(true);
    let rx = spawn_readers(&mut child, inv.cap);

    // An error from the wait is treated as a timeout: the group is killed either way.
    let status = child.wait_timeout(inv.deadline).unwrap_or_default();
    // Always: on timeout this ends the run; after an exit it removes any helper the tool
    // left behind, so the readers see EOF and nothing outlives the call.
    kill_group(pid);
    let status = match status {
        Some(s) => Some(s),
        None => {
            let _ = child.wait();
            None
        }
    };
    register(false);

    let Output {
        stdout,
        stderr,
        over,
    } = collect_output(&rx);
    if let Some(stream) = over {
        return Err(RunError::TooLarge(stream));
    }
    let Some(status) = status else {
        tracing::debug!(tool = %inv.tool.display(), took = ?started.elapsed(), "hccn_tool killed at its deadline");
        return Err(RunError::Timeout);
    };
    Ok(Finished {
        exit: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: if status.signal().is_some() && stderr.is_empty() {
            format!("killed by signal {}", status.signal().unwrap_or(0))
        } else {
            String::from_utf8_lossy(&stderr).into_owned()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, deadline: Duration, cap: usize) -> Result<Finished, RunError> {
        let args = vec!["-c".to_string(), script.to_string()];
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        run(&Invocation {
            tool: Path::new("/bin/sh"),
            args: &args,
            env: &env,
            deadline,
            cap,
            running: None,
            closed: None,
        })
    }

    #[test]
    fn captures_both_streams_and_the_exit_status() {
        let f = sh(
            "echo out; echo err >&2; exit 11",
            Duration::from_secs(5),
            1024,
        )
        .unwrap();
        assert_eq!(f.exit, Some(11));
        assert_eq!(f.stdout, "out\n");
        assert_eq!(f.stderr, "err\n");
    }

    #[test]
    fn environment_is_only_what_is_given() {
        // The child prints its whole environment (sh adds PWD, SHLVL and `_` itself).
        let f = sh("env", Duration::from_secs(5), 4096).unwrap();
        let names: Vec<&str> = f
            .stdout
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .filter(|k| *k != "PWD" && *k != "SHLVL" && *k != "_")
            .collect();
        assert_eq!(names, vec!["PATH"], "{}", f.stdout);
    }

    #[test]
    fn the_deadline_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        // A helper in the same group that would outlive the tool.
        let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let t0 = Instant::now();
        let r = sh(&script, Duration::from_millis(300), 1024);
        assert!(matches!(r, Err(RunError::Timeout)), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        // The helper is gone (or at most a zombie of a reaped shell, which init collects).
        // SIGKILL to the group is delivered asynchronously: a loaded machine may still show
        // the helper for a moment, so it is given a second to die (seen once in a full run).
        let alive = || {
            std::fs::read_to_string(&stat)
                .map(|s| s.split_whitespace().nth(2).is_none_or(|st| st != "Z"))
                .unwrap_or(false)
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        while alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(), "helper {} survived the deadline", pid.trim());
    }

    #[test]
    fn output_past_the_cap_is_an_error_not_a_reading() {
        let r = sh("head -c 100000 /dev/zero", Duration::from_secs(5), 1000);
        assert!(matches!(r, Err(RunError::TooLarge("stdout"))), "{r:?}");
        let f = sh("head -c 1000 /dev/zero", Duration::from_secs(5), 1000).unwrap();
        assert_eq!(f.stdout.len(), 1000);
    }

    #[test]
    fn a_missing_tool_is_a_spawn_error() {
        let r = run(&Invocation {
            tool: Path::new("/nonexistent/hccn_tool"),
            args: &[],
            env: &[],
            deadline: Duration::from_secs(1),
            cap: 10,
            running: None,
            closed: None,
        });
        assert!(matches!(r, Err(RunError::Spawn(_))), "{r:?}");
    }
}
