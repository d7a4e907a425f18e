//! Ring algorithms: reduce-scatter, all-gather, and all-reduce as the two in sequence.
//!
//! Each of the n−1 steps sends one part to the right neighbour and receives one from the
//! left; the transport receives in chunks and reduces each chunk as it lands, while the
//! send proceeds on its own thread, so sending, receiving and reducing overlap. A ring
//! moves 2(n−1)/n of the buffer per rank for an all-reduce, the bandwidth optimum.

use super::{OpCtx, part_ranges, step_parts};
use crate::collective::dtype::ReduceOp;
use crate::collective::error::CollResult;
use crate::collective::transport::RecvMode;

/// The two neighbours.
pub fn neighbours(rank: usize, n: usize) -> (usize, usize) {
    ((rank + n - 1) % n, (rank + 1) % n)
}

/// The shape of one ring pass: its members (global ranks in ring order, this rank among
/// them), the part rotation `shift`, how a received part lands, and the name its steps
/// carry.
#[derive(Clone, Copy)]
pub struct Pass<'a> {
    /// The ranks of the ring, in ring order.
    pub members: &'a [usize],
    /// Rotates which part each member sends first (see [`pass`]).
    pub shift: usize,
    /// Reduce (reduce-scatter) or copy (all-gather) each received part.
    pub mode: RecvMode<'a>,
    /// The pass's name in step names and errors.
    pub what: &'static str,
    /// Called with each received part's index and bytes once it has landed, before this
    /// member forwards it: the test-only relay fault of a signed all-gather
    /// (`collective::authorship`); `None` everywhere else.
    pub relay: Option<&'a RelayHook<'a>>,
}

impl std::fmt::Debug for Pass<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pass")
            .field("members", &self.members)
            .field("shift", &self.shift)
            .field("mode", &self.mode)
            .field("what", &self.what)
            .field("relay", &self.relay.is_some())
            .finish()
    }
}

/// What a relaying member may do to a part it forwards: `(part index, part bytes)`.
pub type RelayHook<'a> = dyn Fn(usize, &mut [u8]) + 'a;

/// One ring pass of m − 1 steps over `p.members`: in step s, member i sends part
/// (i + shift − s) mod m to its right neighbour and receives part (i + shift − s − 1) mod m
/// from its left, reducing or copying it. A reduce-scatter pass leaves part
/// (i + shift + 1) mod m complete; an all-gather pass starts from part (i + shift) mod m.
///
/// `src`, for a reduce-scatter pass only, is an out-of-place input of `buf`'s length: the
/// first step sends from it and every received part is reduced with its counterpart in
/// it, so `buf` needs no copy of the input (its parts are written as they arrive; part
/// (i + shift) mod m is left untouched).
pub fn pass(
    ctx: &OpCtx<'_>,
    p: Pass<'_>,
    src: Option<&[u8]>,
    buf: &mut [u8],
    count: usize,
) -> CollResult<()> {
    let Pass {
        members,
        shift,
        mode,
        what,
        relay,
    } = p;
    let m = members.len();
    if m < 2 {
        return Ok(());
    }
    let me = ctx.mesh.rank();
    let i = members.iter().position(|x| *x == me).unwrap_or(0);
    let (left, right) = (members[(i + m - 1) % m], members[(i + 1) % m]);
    let parts = part_ranges(count, m, ctx.dtype.size());
    for s in 0..m - 1 {
        let send_part = (i + 2 * m - s + shift) % m;
        let recv_part = (i + 2 * m - s - 1 + shift) % m;
        let (sp, rp) = (parts[send_part].clone(), parts[recv_part].clone());
        let (sb, rb, mode) = step_parts(buf, src, s == 0, sp, rp, mode);
        ctx.exchange(
            format!("{what} step {}/{}", s + 1, m - 1),
            Some((right, sb)),
            Some((left, rb, mode)),
        )?;
        // Only a part this rank forwards (all but the last step's) passes the hook.
        if let Some(hook) = relay.filter(|_| s + 2 < m) {
            hook(recv_part, &mut buf[parts[recv_part].clone()]);
        }
    }
    Ok(())
}

fn everyone(ctx: &OpCtx<'_>) -> Vec<usize> {
    (0..ctx.mesh.world()).collect()
}

/// Ring reduce-scatter over `buf` (`count` elements in n parts), in place or from `src`
/// (see [`pass`]). Afterwards part `(rank + 1 + shift) % n` holds the full reduction.
pub fn reduce_scatter(
    ctx: &OpCtx<'_>,
    src: Option<&[u8]>,
    buf: &mut [u8],
    count: usize,
    op: ReduceOp,
    shift: usize,
) -> CollResult<()> {
    let p = Pass {
        members: &everyone(ctx),
        shift,
        mode: RecvMode::Reduce(op),
        what: "reduce-scatter",
        relay: None,
    };
    pass(ctx, p, src, buf, count)
}

/// In-place ring all-gather: part `(rank + shift) % n` is this rank's; afterwards every
/// part is filled.
pub fn all_gather(ctx: &OpCtx<'_>, buf: &mut [u8], count: usize, shift: usize) -> CollResult<()> {
    all_gather_relaying(ctx, buf, count, shift, None)
}

/// [`all_gather`], calling `relay` on every part this rank receives before it forwards it
/// (see [`Pass::relay`]).
pub fn all_gather_relaying(
    ctx: &OpCtx<'_>,
    buf: &mut [u8],
    count: usize,
    shift: usize,
    relay: Option<&RelayHook<'_>>,
) -> CollResult<()> {
    let p = Pass {
        members: &everyone(ctx),
        shift,
        mode: RecvMode::Copy,
        what: "all-gather",
        relay,
    };
    pass(ctx, p, None, buf, count)
}

/// Ring all-reduce into `buf`, in place or from `src`. Out of place, every part of `buf`
/// is written by the ring itself: the part this rank's reduce-scatter leaves untouched is
/// the first one its all-gather receives.
pub fn all_reduce(
    ctx: &OpCtx<'_>,
    src: Option<&[u8]>,
    buf: &mut [u8],
    count: usize,
    op: ReduceOp,
) -> CollResult<()> {
    let n = ctx.mesh.world();
    reduce_scatter(ctx, src, buf, count, op, 0)?;
    // After the reduce-scatter rank r owns part (r + 1) % n: all-gather from there.
    all_gather(ctx, buf, count, 1 % n.max(1))
}
