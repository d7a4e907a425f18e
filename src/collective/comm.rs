//! The communicator: HCCL's operations over the TCP mesh.
//!
//! Argument conventions follow HCCL: `count` is in elements; all-gather takes the
//! per-rank *send* count, reduce-scatter the per-rank *receive* count; every rank passes
//! the same count, type and operator. Buffers are byte slices whose lengths are checked
//! against the counts before anything is sent (`HCCL_E_PARA` otherwise).
//!
//! Every operation is bounded by the execution timeout. After a failure the communicator
//! is poisoned: its connections are shut down (so the other ranks fail fast too) and
//! every later call returns the original error until the survivors [`reform`] a new one.
//!
//! Every operation's payload is control (tagged on the wire, see
//! [`transport::seal`](super::transport::seal)) unless run through [`Communicator::bulk`]:
//! measurement traffic, tagged only when `authenticate_payloads` is on. Receivers that
//! size a buffer from what a peer announces use [`Communicator::broadcast_bytes`] or
//! [`Communicator::all_gather_bytes`], which check the announced length against the
//! caller's limit before allocating.
//!
//! [`reform`]: Communicator::reform

use std::net::{SocketAddr, TcpListener};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::algo::select::{self, Algo, Costs, Override};
use super::algo::{OpCtx, bruck, hd, hier, pairwise, per_slice, ring, tree};
use super::authorship::RelayFault;
use super::dtype::{DataType, ReduceOp};
use super::error::{CollError, CollResult, HcclCode};
use super::identity::MemberIdentity;
use super::timeline::{Event, Timeline};
use super::transport::{HandshakeStats, Mesh, Payload, RecvMode, TransportConfig};

mod signed;

/// One operation as the timeline records it: its name and algorithm (also in errors), its
/// size in bytes and its element type.
#[derive(Debug, Clone, Copy)]
struct Op {
    name: &'static str,
    algo: &'static str,
    bytes: usize,
    dtype: DataType,
}

impl Op {
    const fn new(name: &'static str, algo: &'static str, bytes: usize, dtype: DataType) -> Self {
        Self {
            name,
            algo,
            bytes,
            dtype,
        }
    }
}

/// How long [`Communicator::leave`] waits for its notice to be acknowledged.
pub const LEAVE_WITHIN: Duration = Duration::from_millis(500);

/// Slice of a large all-reduce with one rank per core: on the 2-core test host, 2-rank
/// busbw at 8–64 MiB was highest with 4 MiB slices (3.1–4.1 GB/s, against 2.8–3.7 at
/// 1 MiB and 2.6–3.2 at 8 MiB), and 4 ranks, two per core, peaked at 2 MiB.
const SLICE_PER_CORE: usize = 4 << 20;

/// Smallest automatic slice. At 4 ranks, 1 MiB slices were already slower than 2 MiB
/// (64 MiB: 1.56 against 1.66 GB/s): every slice pays the algorithm's per-step latency.
const SLICE_MIN: usize = 1 << 20;

/// Communicator settings.
#[derive(Debug, Clone)]
pub struct CommConfig {
    /// Transport settings (communicator id, key, channels, timeouts, faults).
    pub transport: TransportConfig,
    /// Bound on every operation (like `HCCL_EXEC_TIMEOUT`).
    pub exec_timeout: Duration,
    /// `HCCL_ALGO`-style override.
    pub algo: Override,
    /// Measure α and β at start-up (otherwise assume typical TCP values).
    pub measure_costs: bool,
    /// Timeline capacity (events kept); 0 disables it.
    pub timeline_events: usize,
    /// Bytes per slice of a large ring or halving-doubling all-reduce; `None` sizes it
    /// from the host (see [`Communicator::slice_bytes`]).
    pub slice_bytes: Option<usize>,
    /// Test-only: rewrite blocks this member relays in signed all-gathers.
    pub relay_fault: Option<RelayFault>,
    /// Certificate mode ([`super::identity`]); None: the shared key alone.
    pub identity: Option<MemberIdentity>,
    /// Sign all-gathers from wire version 4 (every rank alike; [`super::authorship`]).
    pub sign_gathers: bool,
}

impl CommConfig {
    /// Defaults: 60 s execution timeout, measured costs, 4096 timeline events.
    pub fn new(transport: TransportConfig) -> Self {
        Self {
            transport,
            exec_timeout: Duration::from_secs(60),
            algo: Override::default(),
            measure_costs: true,
            timeline_events: 4096,
            slice_bytes: None,
            relay_fault: None,
            identity: None,
            sign_gathers: true,
        }
    }
}

/// A group of ranks that run collectives together.
#[derive(Debug)]
pub struct Communicator {
    mesh: Mesh,
    listener: Arc<TcpListener>,
    addrs: Vec<SocketAddr>,
    /// Ranks grouped by host, fixed for the communicator's life (read on every operation).
    groups: Vec<Vec<usize>>,
    /// [`Communicator::slice_bytes`], worked out once: finding the CPU count reads
    /// cgroup files.
    slice: usize,
    cfg: CommConfig,
    costs: Costs,
    broken: Option<CollError>,
    timeline: Timeline,
    /// The payload class of the operations run now (see [`Communicator::bulk`]).
    class: Payload,
    /// How its all-gathers are signed, from wire version 4 ([`super::authorship`]).
    signing: Option<signed::Signing>,
}

/// A communicator whose operations carry bulk payloads while this guard lives (see
/// [`Communicator::bulk`]); it dereferences to the communicator.
#[derive(Debug)]
pub struct Bulk<'a> {
    comm: &'a mut Communicator,
    prev: Payload,
}

impl Deref for Bulk<'_> {
    type Target = Communicator;
    fn deref(&self) -> &Communicator {
        self.comm
    }
}

impl DerefMut for Bulk<'_> {
    fn deref_mut(&mut self) -> &mut Communicator {
        self.comm
    }
}

impl Drop for Bulk<'_> {
    fn drop(&mut self) {
        self.comm.class = self.prev;
    }
}

fn check_len(op: &str, what: &str, len: usize, count: usize, dtype: DataType) -> CollResult<()> {
    let need = count
        .checked_mul(dtype.size())
        .ok_or_else(|| CollError::para(op, "count overflows"))?;
    if len != need {
        return Err(CollError::para(
            op,
            format!(
                "{what} buffer holds {len} bytes but {count} × {} needs {need}",
                dtype.name()
            ),
        ));
    }
    Ok(())
}

impl Communicator {
    /// Joins the communicator as `rank`: `addrs[i]` is rank i's listening address and
    /// `listener` is bound to `addrs[rank]`.
    pub fn init(
        listener: TcpListener,
        rank: usize,
        addrs: Vec<SocketAddr>,
        cfg: CommConfig,
    ) -> CollResult<Self> {
        Self::init_shared(Arc::new(listener), rank, addrs, cfg)
    }

    fn init_shared(
        listener: Arc<TcpListener>,
        rank: usize,
        addrs: Vec<SocketAddr>,
        cfg: CommConfig,
    ) -> CollResult<Self> {
        if cfg.transport.key.is_empty() {
            return Err(CollError::para("init", "an authentication key is required"));
        }
        let mesh = Mesh::establish(&listener, rank, &addrs, cfg.transport.clone())?;
        let timeline = Timeline::new(cfg.timeline_events);
        let ips: Vec<std::net::IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
        let groups = hier::groups(&ips);
        let slice = cfg.slice_bytes.map_or_else(
            || {
                let local = groups
                    .iter()
                    .find(|g| g.contains(&rank))
                    .map_or(1, Vec::len);
                let cpus = std::thread::available_parallelism().map_or(1, usize::from);
                (SLICE_PER_CORE / local.div_ceil(cpus).max(1)).max(SLICE_MIN)
            },
            |b| b.max(1),
        );
        let mut c = Self {
            mesh,
            listener,
            addrs,
            groups,
            slice,
            costs: Costs {
                alpha: 50e-6,
                beta: 1.0 / 1e9,
            },
            cfg,
            broken: None,
            timeline,
            class: Payload::Control,
            signing: None,
        };
        if c.cfg.measure_costs && c.size() > 1 {
            c.costs = c.measure()?;
        }
        c.signing = c.establish_signing()?;
        Ok(c)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.mesh.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.mesh.world()
    }

    /// The wire version the members agreed on: the highest every one of them speaks
    /// (`transport::wire`). Payload layouts that changed between versions (the probe
    /// round's row) follow it.
    pub fn wire_version(&self) -> u8 {
        self.mesh.version()
    }

    /// The α-β costs measured at start-up (slowest rank's view).
    pub fn costs(&self) -> Costs {
        self.costs
    }

    /// The operation timeline.
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// Connections per peer.
    pub fn channels(&self) -> usize {
        self.cfg.transport.channels
    }

    /// The address this rank listens on.
    pub fn listen_addr(&self) -> SocketAddr {
        self.addrs[self.rank()]
    }

    /// The IP TOS byte of each connection to `peer` (diagnostics for DSCP marking).
    pub fn socket_tos(&self, peer: usize) -> std::io::Result<Vec<u32>> {
        self.mesh.socket_tos(peer)
    }

    /// The error that broke this communicator, if any.
    pub fn broken(&self) -> Option<&CollError> {
        self.broken.as_ref()
    }

    /// Leaves the communicator on purpose: every peer's next operation with this rank
    /// fails with `HCCL_E_REMOTE` carrying `reason` (instead of a bare lost connection), so
    /// the others can tell a departure from a crash. Returns once every peer has
    /// acknowledged the notice, or after [`LEAVE_WITHIN`], so the process may exit right
    /// after; returns how many peers acknowledged.
    pub fn leave(self, reason: &str) -> usize {
        self.leave_within(reason, LEAVE_WITHIN)
    }

    /// [`leave`](Self::leave), waiting at most `within` for the acknowledgements.
    pub fn leave_within(self, reason: &str, within: Duration) -> usize {
        self.mesh.leave(reason, within)
    }

    /// The operations run through the returned guard carry bulk payloads: measurement
    /// traffic whose content nobody acts on (probe pings, benchmark buffers), tagged only
    /// when `authenticate_payloads` is on. Every other operation is control and always
    /// tagged. Every rank must run an operation in the same class.
    ///
    /// ```no_run
    /// # fn f(c: &mut hcclwatch::collective::Communicator) -> hcclwatch::collective::CollResult<()> {
    /// use hcclwatch::collective::{DataType, ReduceOp};
    /// let mut buf = vec![0u8; 1 << 20];
    /// c.bulk().all_reduce_in_place(&mut buf, 1 << 18, DataType::Fp32, ReduceOp::Sum)?;
    /// # Ok(()) }
    /// ```
    pub fn bulk(&mut self) -> Bulk<'_> {
        let prev = std::mem::replace(&mut self.class, Payload::Bulk);
        Bulk { comm: self, prev }
    }

    /// Counters of refused incoming connections (shared with every communicator built
    /// from the same transport configuration).
    pub fn handshake_stats(&self) -> &Arc<HandshakeStats> {
        &self.cfg.transport.stats
    }

    /// Marks the communicator broken by `e` (telling the peers why) and returns `e`.
    fn poison(&mut self, e: CollError) -> CollError {
        self.mesh.abort_with(&e.to_string());
        self.broken = Some(e.clone());
        e
    }

    /// Broadcasts a byte string from `root`, whose length the others need not know: the
    /// length goes first, and every rank checks it against `max_len` before allocating
    /// (a length above it fails the operation on every rank and names the root). `data`
    /// is read on the root only. Both messages are control payloads.
    pub fn broadcast_bytes(
        &mut self,
        data: &[u8],
        root: usize,
        max_len: usize,
    ) -> CollResult<Vec<u8>> {
        let op = "broadcast_bytes";
        let mut len = [0u8; 8];
        if self.rank() == root {
            len = (data.len() as u64).to_le_bytes();
        }
        self.broadcast(&mut len, 1, DataType::Uint64, root)?;
        let n = u64::from_le_bytes(len);
        if n > max_len as u64 {
            let e = CollError::new(
                HcclCode::Para,
                op,
                Some(root),
                format!("rank {root} announced {n} bytes, more than the {max_len} accepted"),
            );
            return Err(self.poison(e));
        }
        let mut buf = if self.rank() == root {
            data.to_vec()
        } else {
            vec![0u8; n as usize]
        };
        let count = buf.len();
        self.broadcast(&mut buf, count, DataType::Uint8, root)?;
        Ok(buf)
    }

    /// All-gathers one byte string per rank, of any length up to `max_len`: the lengths
    /// go first, and every rank checks each against `max_len` before allocating (a
    /// longer one fails the operation on every rank and names its sender). Returns the
    /// strings in rank order. Both messages are control payloads.
    pub fn all_gather_bytes(&mut self, mine: &[u8], max_len: usize) -> CollResult<Vec<Vec<u8>>> {
        let op = "all_gather_bytes";
        let n = self.size();
        let own = (mine.len() as u64).to_le_bytes();
        let mut lens = vec![0u8; 8 * n];
        self.all_gather(&own, &mut lens, 1, DataType::Uint64)?;
        let lens: Vec<u64> = lens
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
            .collect();
        if let Some((r, l)) = lens.iter().enumerate().find(|(_, l)| **l > max_len as u64) {
            let e = CollError::new(
                HcclCode::Para,
                op,
                Some(r),
                format!("rank {r} announced {l} bytes, more than the {max_len} accepted"),
            );
            return Err(self.poison(e));
        }
        // Every length is at most `max_len` now, so the buffer is at most n × max_len.
        let width = lens.iter().copied().max().unwrap_or(0) as usize;
        let mut block = mine.to_vec();
        block.resize(width, 0);
        let mut all = vec![0u8; width * n];
        self.all_gather(&block, &mut all, width, DataType::Uint8)?;
        Ok(lens
            .iter()
            .enumerate()
            .map(|(r, l)| all[r * width..r * width + *l as usize].to_vec())
            .collect())
    }

    /// The all-reduce algorithm that would be used for `bytes`: hierarchical when ranks
    /// share hosts and there are several hosts (as HCCL splits intra- and inter-server),
    /// unless `HCCL_ALGO` forces a flat one; otherwise the cheaper by α-β cost.
    pub fn allreduce_algo(&self, bytes: usize) -> Algo {
        if let Some(forced) = self.cfg.algo.for_op("allreduce") {
            return forced;
        }
        if hier::applies(&self.groups) {
            return Algo::Hierarchical;
        }
        select::choose_allreduce(self.size(), bytes, self.costs)
    }

    /// Bytes per slice of a large all-reduce. A ring or halving-doubling all-reduce of a
    /// buffer above this size runs as one all-reduce per slice, one after another, so the
    /// part a step reduces is still in cache when the next step sends it. Run over the
    /// whole buffer, every step streams its input from memory: at 64 MiB, 4 ranks reached
    /// 0.91 GB/s busbw unsliced and 1.66 with 2 MiB slices on this project's 2-core test
    /// host (see README, "Engine performance").
    ///
    /// Unless configured, a slice is 4 MiB (the best size measured with one rank per core),
    /// divided by the number of ranks on this host that share a CPU, and at least 1 MiB:
    /// ranks that share a core share its cache. On a link whose latency would make that
    /// many slices costly, the all-reduce uses larger ones (see [`select::min_slice`]).
    pub fn slice_bytes(&self) -> usize {
        self.slice
    }

    /// The algorithm and slice size of an all-reduce of `bytes`. Every slice costs the
    /// same, so the cheapest algorithm for one slice is the cheapest for the whole buffer.
    /// Unless the slice size is configured, it is raised to the algorithm's latency floor
    /// ([`select::min_slice`]) by the measured α and β, and the algorithm chosen again for
    /// the larger slice.
    pub fn allreduce_plan(&self, bytes: usize) -> (Algo, usize) {
        let algo = self.allreduce_algo(bytes.min(self.slice));
        if self.cfg.slice_bytes.is_some() || bytes <= self.slice {
            return (algo, self.slice);
        }
        let floor = select::min_slice(algo, self.size(), self.costs);
        if floor <= self.slice {
            return (algo, self.slice);
        }
        (self.allreduce_algo(bytes.min(floor)), floor)
    }

    /// Ranks grouped by the host (IP address) they listen on.
    pub fn host_groups(&self) -> &[Vec<usize>] {
        &self.groups
    }

    /// Runs one operation `f` that sends to `sends` and receives from `recvs`: claims its
    /// sequence numbers, records it on the timeline, and on failure tells the peers why
    /// and marks the communicator broken.
    fn run<T>(
        &mut self,
        op: Op,
        sends: &[usize],
        recvs: &[usize],
        f: impl FnOnce(&OpCtx<'_>) -> CollResult<T>,
    ) -> CollResult<T> {
        let Op {
            name: op,
            algo,
            bytes,
            dtype,
        } = op;
        if let Some(e) = &self.broken {
            return Err(CollError::new(
                e.code,
                op,
                e.peer,
                format!(
                    "communicator is broken by an earlier failure ({e}); re-form it with the survivors"
                ),
            ));
        }
        let start = Instant::now();
        let ctx = OpCtx::new(
            &self.mesh,
            (dtype, self.class),
            start + self.cfg.exec_timeout,
            (op, algo),
            sends,
            recvs,
        );
        let r = f(&ctx);
        let steps = ctx.take_steps();
        drop(ctx);
        self.timeline.push(Event {
            op,
            algo,
            bytes,
            rank: self.rank(),
            start,
            end: Instant::now(),
            ok: r.is_ok(),
            steps,
        });
        if let Err(e) = &r {
            // Tell the peers why before closing, so their errors name the root cause.
            self.mesh.abort_with(&e.to_string());
            self.broken = Some(e.clone());
        }
        r
    }

    /// All-reduce `send` into `recv` (`count` elements each).
    pub fn all_reduce(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        count: usize,
        dtype: DataType,
        op: ReduceOp,
    ) -> CollResult<Algo> {
        check_len("all_reduce", "send", send.len(), count, dtype)?;
        check_len("all_reduce", "recv", recv.len(), count, dtype)?;
        self.all_reduce_from(Some(send), recv, count, dtype, op)
    }

    /// In-place all-reduce (HCCL allows `sendBuf == recvBuf`).
    pub fn all_reduce_in_place(
        &mut self,
        buf: &mut [u8],
        count: usize,
        dtype: DataType,
        op: ReduceOp,
    ) -> CollResult<Algo> {
        check_len("all_reduce", "buffer", buf.len(), count, dtype)?;
        self.all_reduce_from(None, buf, count, dtype, op)
    }

    /// All-reduce into `buf`, whose input is `src` (out of place) or `buf` itself. Ring and
    /// halving-doubling read an out-of-place input where they need it instead of copying
    /// it into `buf` first: at 64 MiB that copy is a quarter of the operation's time on a
    /// memory-bound host. Bruck and the hierarchical algorithm copy.
    fn all_reduce_from(
        &mut self,
        src: Option<&[u8]>,
        buf: &mut [u8],
        count: usize,
        dtype: DataType,
        op: ReduceOp,
    ) -> CollResult<Algo> {
        let (n, r) = (self.size(), self.rank());
        let (algo, slice) = self.allreduce_plan(buf.len());
        let src = match src {
            Some(s) if n == 1 || !matches!(algo, Algo::Ring | Algo::HalvingDoubling) => {
                buf.copy_from_slice(s);
                None
            }
            other => other,
        };
        if n == 1 {
            return Ok(algo);
        }
        match algo {
            Algo::Ring => {
                let (left, right) = ring::neighbours(r, n);
                self.run(
                    Op::new("all_reduce", algo.name(), buf.len(), dtype),
                    &[right],
                    &[left],
                    |ctx| {
                        per_slice(src, buf, slice, dtype, |s, b, c| {
                            ring::all_reduce(ctx, s, b, c, op)
                        })
                    },
                )?;
            }
            Algo::Bruck => {
                let (to, from) = bruck::peers(r, n);
                let mut both: Vec<usize> = to.iter().chain(&from).copied().collect();
                both.sort_unstable();
                both.dedup();
                self.run(
                    Op::new("all_reduce", algo.name(), buf.len(), dtype),
                    &both,
                    &both,
                    |ctx| bruck::all_reduce(ctx, buf, count, op),
                )?;
            }
            Algo::HalvingDoubling => {
                let peers = hd::peers(r, n);
                self.run(
                    Op::new("all_reduce", algo.name(), buf.len(), dtype),
                    &peers,
                    &peers,
                    |ctx| {
                        per_slice(src, buf, slice, dtype, |s, b, c| {
                            hd::all_reduce(ctx, s, b, c, op)
                        })
                    },
                )?;
            }
            Algo::Hierarchical => {
                let groups = self.groups.clone();
                let peers = hier::peers(r, &groups);
                self.run(
                    Op::new("all_reduce", algo.name(), buf.len(), dtype),
                    &peers,
                    &peers,
                    |ctx| hier::all_reduce(ctx, &groups, buf, count, op),
                )?;
            }
        }
        Ok(algo)
    }

    /// The all-gather (`op = "allgather"`) or reduce-scatter (`"reducescatter"`)
    /// algorithm for `bytes` in all: forced by `HCCL_ALGO` (halving-doubling, else ring),
    /// otherwise the cheaper by α-β cost.
    pub fn gather_algo(&self, op: &str, bytes: usize) -> Algo {
        match self.cfg.algo.for_op(op) {
            Some(a @ (Algo::HalvingDoubling | Algo::Bruck)) => a,
            Some(_) => Algo::Ring,
            None => select::choose_gather(self.size(), bytes, self.costs),
        }
    }

    /// All-gather: every rank contributes `send_count` elements; `recv` holds
    /// `size × send_count`, rank i's block at position i. Returns the algorithm used.
    pub fn all_gather(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        send_count: usize,
        dtype: DataType,
    ) -> CollResult<Algo> {
        let (n, r) = (self.size(), self.rank());
        check_len("all_gather", "send", send.len(), send_count, dtype)?;
        check_len("all_gather", "recv", recv.len(), send_count * n, dtype)?;
        let block = send.len();
        recv[r * block..(r + 1) * block].copy_from_slice(send);
        let algo = self.gather_algo("allgather", recv.len());
        if n == 1 {
            return Ok(algo);
        }
        if algo == Algo::HalvingDoubling {
            let peers = hd::peers(r, n);
            self.run(
                Op::new("all_gather", algo.name(), recv.len(), dtype),
                &peers,
                &peers,
                |ctx| hd::all_gather(ctx, recv, block),
            )?;
            return Ok(algo);
        }
        if algo == Algo::Bruck {
            let (to, from) = bruck::peers(r, n);
            let blocks = bruck::equal_blocks(n, block);
            self.run(
                Op::new("all_gather", algo.name(), recv.len(), dtype),
                &to,
                &from,
                |ctx| bruck::all_gather(ctx, recv, &blocks),
            )?;
            return Ok(algo);
        }
        let (left, right) = ring::neighbours(r, n);
        self.run(
            Op::new("all_gather", "ring", recv.len(), dtype),
            &[right],
            &[left],
            |ctx| ring::all_gather(ctx, recv, send_count * n, 0),
        )?;
        Ok(Algo::Ring)
    }

    /// Reduce-scatter: `send` holds `size × recv_count` elements; rank i receives the
    /// reduction of every rank's block i. Returns the algorithm used.
    pub fn reduce_scatter(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        recv_count: usize,
        dtype: DataType,
        op: ReduceOp,
    ) -> CollResult<Algo> {
        let (n, r) = (self.size(), self.rank());
        check_len("reduce_scatter", "send", send.len(), recv_count * n, dtype)?;
        check_len("reduce_scatter", "recv", recv.len(), recv_count, dtype)?;
        let algo = self.gather_algo("reducescatter", send.len());
        if n == 1 {
            recv.copy_from_slice(send);
            return Ok(algo);
        }
        // Ring and halving-doubling read `send` where they need it (see `ring::pass`), so
        // their work buffer starts empty; Bruck reduces in a copy of it.
        let mut work = if algo == Algo::Bruck {
            send.to_vec()
        } else {
            vec![0u8; send.len()]
        };
        let b = recv.len();
        if algo == Algo::HalvingDoubling {
            let peers = hd::peers(r, n);
            self.run(
                Op::new("reduce_scatter", algo.name(), send.len(), dtype),
                &peers,
                &peers,
                |ctx| hd::reduce_scatter(ctx, Some(send), &mut work, b, op),
            )?;
        } else if algo == Algo::Bruck {
            let (to, from) = bruck::peers(r, n);
            let blocks = bruck::equal_blocks(n, b);
            self.run(
                Op::new("reduce_scatter", algo.name(), send.len(), dtype),
                &from,
                &to,
                |ctx| bruck::reduce_scatter(ctx, &mut work, &blocks, op),
            )?;
        } else {
            let (left, right) = ring::neighbours(r, n);
            self.run(
                Op::new("reduce_scatter", "ring", send.len(), dtype),
                &[right],
                &[left],
                |ctx| ring::reduce_scatter(ctx, Some(send), &mut work, recv_count * n, op, n - 1),
            )?;
        }
        recv.copy_from_slice(&work[r * b..(r + 1) * b]);
        Ok(algo)
    }

    /// Broadcast `buf` from `root`.
    pub fn broadcast(
        &mut self,
        buf: &mut [u8],
        count: usize,
        dtype: DataType,
        root: usize,
    ) -> CollResult<()> {
        let (n, r) = (self.size(), self.rank());
        check_len("broadcast", "buffer", buf.len(), count, dtype)?;
        if root >= n {
            return Err(CollError::para(
                "broadcast",
                format!("root {root} is outside a world of {n}"),
            ));
        }
        if n == 1 {
            return Ok(());
        }
        let (parent, children) = tree::links(r, root, n);
        let recvs: Vec<usize> = parent.into_iter().collect();
        self.run(
            Op::new("broadcast", "binomial", buf.len(), dtype),
            &children,
            &recvs,
            |ctx| tree::broadcast(ctx, buf, root),
        )
    }

    /// Reduce to `root`: `recv` is written on the root only (other ranks may pass an
    /// empty slice).
    pub fn reduce(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        root: usize,
    ) -> CollResult<()> {
        let (n, r) = (self.size(), self.rank());
        check_len("reduce", "send", send.len(), count, dtype)?;
        if root >= n {
            return Err(CollError::para(
                "reduce",
                format!("root {root} is outside a world of {n}"),
            ));
        }
        if r == root {
            check_len("reduce", "recv", recv.len(), count, dtype)?;
        }
        let mut work = send.to_vec();
        if n > 1 {
            let (parent, children) = tree::links(r, root, n);
            let sends: Vec<usize> = parent.into_iter().collect();
            self.run(
                Op::new("reduce", "binomial", send.len(), dtype),
                &sends,
                &children,
                |ctx| tree::reduce(ctx, &mut work, op, root),
            )?;
        }
        if r == root {
            recv.copy_from_slice(&work);
        }
        Ok(())
    }

    /// All-to-all: block i (`count` elements) of `send` goes to rank i; block i of
    /// `recv` comes from rank i.
    pub fn all_to_all(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        count: usize,
        dtype: DataType,
    ) -> CollResult<()> {
        let n = self.size();
        check_len("all_to_all", "send", send.len(), count * n, dtype)?;
        check_len("all_to_all", "recv", recv.len(), count * n, dtype)?;
        let block = count * dtype.size();
        let others: Vec<usize> = (0..n).filter(|p| *p != self.rank()).collect();
        self.run(
            Op::new("all_to_all", "pairwise", send.len(), dtype),
            &others,
            &others,
            |ctx| pairwise::all_to_all(ctx, send, recv, block),
        )
    }

    /// Sends `buf` to `peer` (matched by the peer's [`recv`](Self::recv)).
    pub fn send(
        &mut self,
        buf: &[u8],
        count: usize,
        dtype: DataType,
        peer: usize,
    ) -> CollResult<()> {
        check_len("send", "send", buf.len(), count, dtype)?;
        self.check_peer("send", peer)?;
        self.run(
            Op::new("send", "p2p", buf.len(), dtype),
            &[peer],
            &[],
            |ctx| ctx.point_to_point("send", Some((peer, buf)), None),
        )
    }

    /// Sends `send` to `to` while receiving `recv` from `from` (each `count` elements);
    /// `to` and `from` may be the same rank. The matching ranks call it with the roles
    /// mirrored.
    pub fn send_recv(
        &mut self,
        send: &[u8],
        to: usize,
        recv: &mut [u8],
        from: usize,
        count: usize,
        dtype: DataType,
    ) -> CollResult<()> {
        check_len("send_recv", "send", send.len(), count, dtype)?;
        check_len("send_recv", "recv", recv.len(), count, dtype)?;
        self.check_peer("send_recv", to)?;
        self.check_peer("send_recv", from)?;
        self.run(
            Op::new("send_recv", "p2p", send.len(), dtype),
            &[to],
            &[from],
            |ctx| {
                ctx.point_to_point(
                    "send_recv",
                    Some((to, send)),
                    Some((from, recv, RecvMode::Copy)),
                )
            },
        )
    }

    /// Receives `buf` from `peer`.
    pub fn recv(
        &mut self,
        buf: &mut [u8],
        count: usize,
        dtype: DataType,
        peer: usize,
    ) -> CollResult<()> {
        check_len("recv", "recv", buf.len(), count, dtype)?;
        self.check_peer("recv", peer)?;
        self.run(
            Op::new("recv", "p2p", buf.len(), dtype),
            &[],
            &[peer],
            |ctx| ctx.point_to_point("recv", None, Some((peer, buf, RecvMode::Copy))),
        )
    }

    fn check_peer(&self, op: &str, peer: usize) -> CollResult<()> {
        if peer >= self.size() || peer == self.rank() {
            return Err(CollError::para(
                op,
                format!(
                    "peer {peer} is not another rank of a world of {}",
                    self.size()
                ),
            ));
        }
        Ok(())
    }

    /// Returns once every rank has entered the barrier.
    pub fn barrier(&mut self) -> CollResult<()> {
        let (n, r) = (self.size(), self.rank());
        if n == 1 {
            return Ok(());
        }
        let rounds = pairwise::barrier_rounds(r, n);
        let sends: Vec<usize> = rounds.iter().map(|x| x.0).collect();
        let recvs: Vec<usize> = rounds.iter().map(|x| x.1).collect();
        let op = Op::new("barrier", "dissemination", 1, DataType::Uint8);
        self.run(op, &sends, &recvs, pairwise::barrier)
    }

    /// Builds a new communicator over `addrs` (which must contain this rank's address)
    /// with a new id, reusing this rank's listener: drop a dead rank (shrink) or admit a
    /// returning one (grow). Every member must call it with the same list and id.
    pub fn reform(self, addrs: Vec<SocketAddr>, comm_id: u64) -> CollResult<Communicator> {
        let me = self.addrs[self.rank()];
        let rank = addrs.iter().position(|a| *a == me).ok_or_else(|| {
            CollError::para(
                "reform",
                format!("this rank's address {me} is not in the new member list"),
            )
        })?;
        self.mesh.abort();
        let mut cfg = self.cfg.clone();
        cfg.transport.comm_id = comm_id;
        Self::init_shared(self.listener.clone(), rank, addrs, cfg)
    }

    /// [`reform`](Self::reform) without the ranks in `exclude`.
    pub fn shrink(self, exclude: &[usize], comm_id: u64) -> CollResult<Communicator> {
        let addrs: Vec<SocketAddr> = self
            .addrs
            .iter()
            .enumerate()
            .filter(|(i, _)| !exclude.contains(i))
            .map(|(_, a)| *a)
            .collect();
        self.reform(addrs, comm_id)
    }

    /// Measures α (8-byte ring exchange) and β (1 MiB ring exchange); every rank ends
    /// with the slowest rank's figures.
    fn measure(&mut self) -> CollResult<Costs> {
        let (n, r) = (self.size(), self.rank());
        let (left, right) = ring::neighbours(r, n);
        // Median seconds of one ring shift of `bytes` over `rounds`, after one untimed
        // round. The first round absorbs the ranks' start-up skew: as a mean over all
        // rounds, α at 4 ranks on 2 cores came out at 0.6–0.8 ms for a 20 µs exchange.
        // Bulk, like the traffic the figures predict: with `authenticate_payloads` off a
        // tag would otherwise inflate β and tilt the algorithm choice.
        let prev = std::mem::replace(&mut self.class, Payload::Bulk);
        let mut shift = |step: &'static str, bytes: usize, rounds: usize| -> CollResult<f64> {
            let out = vec![0u8; bytes];
            let mut inc = vec![0u8; bytes];
            let mut times = Vec::with_capacity(rounds);
            for round in 0..=rounds {
                let t = Instant::now();
                self.run(
                    Op::new("measure", "ring", bytes, DataType::Uint8),
                    &[right],
                    &[left],
                    |ctx| {
                        ctx.exchange(
                            step,
                            Some((right, &out)),
                            Some((left, &mut inc, RecvMode::Copy)),
                        )
                    },
                )?;
                if round > 0 {
                    times.push(t.elapsed().as_secs_f64());
                }
            }
            times.sort_by(f64::total_cmp);
            Ok(times[times.len() / 2])
        };
        const BIG: usize = 1 << 20;
        let figures = shift("alpha", 8, 16).and_then(|a| Ok((a, shift("beta", BIG, 3)?)));
        self.class = prev;
        let (alpha, per) = figures?;
        let beta = ((per - alpha) / BIG as f64).max(1e-12);
        let mut both = [0u8; 16];
        both[..8].copy_from_slice(&alpha.to_ne_bytes());
        both[8..].copy_from_slice(&beta.to_ne_bytes());
        let mut ctx_buf = both;
        self.run(
            Op::new("measure", "ring", 16, DataType::Fp64),
            &[right],
            &[left],
            |ctx| ring::all_reduce(ctx, None, &mut ctx_buf, 2, ReduceOp::Max),
        )?;
        let alpha = f64::from_ne_bytes(ctx_buf[..8].try_into().unwrap_or_default());
        let beta = f64::from_ne_bytes(ctx_buf[8..].try_into().unwrap_or_default());
        if !(alpha.is_finite() && beta.is_finite()) {
            return Err(CollError::new(
                HcclCode::Internal,
                "measure",
                None,
                "non-finite link cost",
            ));
        }
        Ok(Costs { alpha, beta })
    }
}
