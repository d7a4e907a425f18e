//! Abort and leave notices: a rank that fails an operation, or leaves on purpose, tells
//! every peer why in a tagged abort frame on channel 0, so a peer waiting on it reports
//! `HCCL_E_REMOTE` with the reason instead of a bare lost connection.

use std::io::{IoSlice, Read};
use std::time::{Duration, Instant};

use super::frame::{ABORT_MAX, HEADER_LEN, Header, Kind};
use super::rawio::{close_after_delivery, write_all_vectored};
use super::seal::{self, TAG_LEN};
use super::{Link, Mesh, forged, io_error};
use crate::collective::error::{CollError, HcclCode};

impl Mesh {
    /// Tells every peer why this rank failed (an abort frame on channel 0, best effort,
    /// 100 ms per peer at most), then shuts every connection down. A peer waiting on us
    /// then reports `HCCL_E_REMOTE` with our reason instead of a bare lost connection.
    pub fn abort_with(&self, reason: &str) {
        for p in self.peers.iter().flatten() {
            if let Some(l) = p.links.first() {
                let _ = self.send_notice(l, reason, Duration::from_millis(100));
            }
        }
        self.abort();
    }

    /// Writes a tagged abort frame carrying `reason` (cut to [`ABORT_MAX`] bytes) on one
    /// link, waiting at most `within` for room in the socket buffer.
    fn send_notice(&self, l: &Link, reason: &str, within: Duration) -> std::io::Result<()> {
        let msg = &reason.as_bytes()[..reason.len().min(ABORT_MAX)];
        let head = Header {
            version: self.version,
            kind: Kind::Abort,
            dtype: 0,
            comm_id: self.cfg.comm_id,
            seq: 0,
            len: msg.len() as u32,
            chunk: 0,
        }
        .encode();
        let tag = seal::tag(l.tx.key(), l.tx.claim(), &head, msg);
        l.stream
            .set_write_timeout(Some(within.max(Duration::from_millis(1))))?;
        write_all_vectored(
            &l.stream,
            &mut [IoSlice::new(&head), IoSlice::new(msg), IoSlice::new(&tag)],
        )
    }

    /// Leaves on purpose: sends `reason` to every peer (as [`abort_with`](Self::abort_with)
    /// does) and returns once every peer's kernel has acknowledged it, or after `within`.
    /// A process may exit right after: the notice is not left in a send queue that a
    /// reset would discard. Returns how many peers acknowledged in time.
    ///
    /// Each connection is shut down for writing (a FIN after the notice), emptied of
    /// anything unread (closing a socket with unread bytes sends a reset, which discards
    /// whatever of ours is still unsent), and closed with `SO_LINGER`, which makes the
    /// close wait for the peer's acknowledgement; the closes run in parallel, one short
    /// thread per connection, so one unresponsive peer does not hold up the others.
    pub fn leave(self, reason: &str, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        for (rank, p) in self.peers.iter().enumerate() {
            if let Some(l) = p.as_ref().and_then(|p| p.links.first()) {
                let left = deadline.saturating_duration_since(Instant::now());
                if let Err(e) = self.send_notice(l, reason, left) {
                    tracing::debug!(peer = rank, "leave notice not sent: {e}");
                }
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let mut pending = 0;
        for (rank, p) in self.peers.into_iter().enumerate() {
            let Some(p) = p else { continue };
            for (ch, l) in p.links.into_iter().enumerate() {
                let tx = tx.clone();
                // The socket moves into the thread, so its last descriptor closes there.
                let spawned =
                    std::thread::Builder::new()
                        .name("hccl-leave".into())
                        .spawn(move || {
                            close_after_delivery(l.stream);
                            let _ = tx.send((rank, ch));
                        });
                pending += usize::from(spawned.is_ok());
            }
        }
        drop(tx);
        let mut done: Vec<(usize, usize)> = Vec::with_capacity(pending);
        while done.len() < pending {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(x) => done.push(x),
                Err(_) => break,
            }
        }
        // A peer counts once all its connections closed cleanly; channel 0 carries the
        // notice, so that is the one that matters.
        done.iter().filter(|(_, ch)| *ch == 0).count()
    }
}

/// An abort frame whose header has been read, where it arrived.
pub(super) struct Notice<'a> {
    /// The rank that sent it.
    pub from: usize,
    /// The channel it arrived on.
    pub ch: usize,
    /// Its header, as read.
    pub header: &'a [u8; HEADER_LEN],
    /// The message length the header announces.
    pub len: usize,
    /// The frame number the receiving direction gave it.
    pub counter: u64,
    /// Bytes after the header that were already read with it.
    pub already: &'a [u8],
}

/// Reads an abort frame's message and tag (part of which may already be in `n.already`)
/// and turns it into the `HCCL_E_REMOTE` error the operation returns, or into an
/// authentication failure if its tag does not match. Its announced length is checked
/// before anything is read.
pub(super) fn read_abort(link: &Link, op: &str, n: Notice<'_>) -> CollError {
    let from = n.from;
    if n.len > ABORT_MAX {
        return CollError::new(
            HcclCode::TcpTransfer,
            op,
            Some(from),
            format!(
                "bad frame: abort notice of {} bytes exceeds the maximum {ABORT_MAX}",
                n.len
            ),
        );
    }
    let mut frame = [0u8; ABORT_MAX + TAG_LEN];
    let frame = &mut frame[..n.len + TAG_LEN];
    let have = n.already.len().min(frame.len());
    frame[..have].copy_from_slice(&n.already[..have]);
    if have < frame.len() {
        // The rest is in flight or never comes: wait briefly, not for the op deadline.
        let _ = link
            .stream
            .set_read_timeout(Some(Duration::from_millis(200)));
        if let Err(e) = (&link.stream).read_exact(&mut frame[have..]) {
            return io_error(op, from, &e, false);
        }
    }
    let (msg, tag) = frame.split_at(n.len);
    if !seal::verify(link.rx.key(), n.counter, n.header, msg, tag) {
        return forged(op, from, n.ch, &link.stream);
    }
    CollError::new(
        HcclCode::Remote,
        op,
        Some(from),
        format!(
            "peer rank {from} aborted the operation: {}",
            String::from_utf8_lossy(msg)
        ),
    )
}
