//! Socket reads and writes under the data path: vectored writes, reads that poll briefly
//! before they block, socket timeouts set only when they drift, and a close that delivers
//! what was written.

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a receive polls for a frame's header before it sleeps in a blocking read.
///
/// A peer that is itself sending a few hundred KiB first, or that was briefly preempted,
/// often takes longer than 50 µs to answer, and every such miss costs a sleep and a
/// wake-up. Interleaved A/B rounds, 50 µs against 200 µs: 2-rank 8 B 11.7–14.6 → 5.2–5.8 µs
/// (medians of four rounds), 512 KiB busbw 2.10 → 2.94 GB/s; 1 ms gained nothing more.
const SPIN: Duration = Duration::from_micros(200);

/// How a receive waits for the header of its next frame. The rest of a frame that has
/// started arriving is always read blocking: it is already in flight, and polling a
/// socket the sender is filling only contends for its lock (interleaved A/B runs: 64 MiB
/// point-to-point 4.7 → 5.4 GB/s, 8 B at 4 ranks 27 → 21 µs against polling every read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// Poll without blocking for up to [`SPIN`] (yielding the CPU between polls), then
    /// block. Waiting for a message a few microseconds away is mostly scheduler latency:
    /// a sleep and a wake-up cost more than the transfer. Only for receives with no helper
    /// thread of this rank waiting for the CPU.
    Spin,
    /// Block in `read` at once (helper threads are sending and need the CPU).
    Block,
}

/// Socket timeouts last set on one connection: (read, write).
pub(super) type Timeouts = Mutex<(Option<Duration>, Option<Duration>)>;

/// Sets a socket timeout only when `remaining` is well below or well above the one in
/// force. Overshoot is bounded by 10 % of the remaining time (the op deadline is also
/// checked between chunks).
pub(super) fn ensure_timeout(
    cache: &Timeouts,
    s: &TcpStream,
    read: bool,
    remaining: Duration,
) -> std::io::Result<()> {
    let mut g = cache.lock().unwrap_or_else(|p| p.into_inner());
    let cur = if read { g.0 } else { g.1 };
    let stale = match cur {
        None => true,
        Some(c) => remaining < c.mul_f64(0.9) || remaining > c.mul_f64(1.5),
    };
    if stale {
        if read {
            s.set_read_timeout(Some(remaining))?;
            g.0 = Some(remaining);
        } else {
            s.set_write_timeout(Some(remaining))?;
            g.1 = Some(remaining);
        }
    }
    Ok(())
}

/// Writes every byte of `bufs`, in as few calls as the socket allows.
pub(super) fn write_all_vectored(
    mut s: &TcpStream,
    mut bufs: &mut [IoSlice<'_>],
) -> std::io::Result<()> {
    while !bufs.is_empty() {
        match s.write_vectored(bufs) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads at least one byte into `buf` (0 at end of stream). `MSG_DONTWAIT` makes a poll
/// non-blocking without switching the socket's mode, which would cost two more system
/// calls per receive.
fn read_some(mut s: &TcpStream, buf: &mut [u8], wait: Wait) -> std::io::Result<usize> {
    if wait == Wait::Spin {
        let start = Instant::now();
        loop {
            match rustix::net::recv(s, &mut *buf, rustix::net::RecvFlags::DONTWAIT) {
                Ok((n, _)) => return Ok(n),
                Err(rustix::io::Errno::AGAIN) if start.elapsed() < SPIN => {
                    std::thread::yield_now();
                }
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    s.read(buf)
}

/// Reads into `buf` until at least `min` bytes are in; returns how many are.
pub(super) fn read_at_least(
    s: &TcpStream,
    buf: &mut [u8],
    min: usize,
    wait: Wait,
) -> std::io::Result<usize> {
    let mut have = 0;
    while have < min {
        match read_some(s, &mut buf[have..], wait) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => have += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(have)
}

/// Fills `buf`, waiting as `wait` says for each part.
pub(super) fn read_exact(s: &TcpStream, buf: &mut [u8], wait: Wait) -> std::io::Result<()> {
    read_at_least(s, buf, buf.len(), wait).map(|_| ())
}

/// Closes a connection so that what was written to it is delivered first: FIN after the
/// data, unread bytes drained (a close with unread bytes resets the connection and drops
/// our unsent data), then a close that lingers until the peer acknowledged everything (at
/// most a second: `SO_LINGER` counts whole seconds, and 0 would mean "reset").
pub(super) fn close_after_delivery(s: TcpStream) {
    let _ = s.shutdown(Shutdown::Write);
    let _ = s.set_nonblocking(true);
    let mut sink = [0u8; 4096];
    loop {
        match (&s).read(&mut sink) {
            Ok(n) if n > 0 => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    let _ = s.set_nonblocking(false);
    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::from_secs(1)));
    drop(s);
}
