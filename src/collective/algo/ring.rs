//! Ring algorithms: reduce-scatter, all-gather, and all-reduce as the two in sequence.
//!
//! Each of the n−1 steps sends one part to the right neighbour and receives one from the
//! left; the transport receives in chunks and reduces each chunk as it lands, while the
//! send proceeds on its own thread, so sending, receiving and reducing overlap. A ring
//! moves 2(n−1)/n of the buffer per rank for an all-reduce, the bandwidth optimum.

use super::{OpCtx, part_ranges, split_pair};
use crate::collective::dtype::ReduceOp;
use crate::collective::error::CollResult;
use crate::collective::transport::RecvMode;

/// The two neighbours.
pub fn neighbours(rank: usize, n: usize) -> (usize, usize) {
    ((rank + n - 1) % n, (rank + 1) % n)
}

/// In-place ring reduce-scatter over `buf` (`count` elements in n parts). Afterwards
/// part `(rank + 1 + shift) % n` holds the full reduction.
pub fn reduce_scatter(
    ctx: &OpCtx<'_>,
    buf: &mut [u8],
    count: usize,
    op: ReduceOp,
    shift: usize,
) -> CollResult<()> {
    let (n, r) = (ctx.mesh.world(), ctx.mesh.rank());
    let (left, right) = neighbours(r, n);
    let parts = part_ranges(count, n, ctx.dtype.size());
    for s in 0..n - 1 {
        let send_part = (r + 2 * n - s + shift) % n;
        let recv_part = (r + 2 * n - s - 1 + shift) % n;
        let (sb, rb) = split_pair(buf, parts[send_part].clone(), parts[recv_part].clone());
        ctx.exchange(
            &format!("reduce-scatter step {}/{}", s + 1, n - 1),
            Some((right, sb)),
            Some((left, rb, RecvMode::Reduce(op))),
        )?;
    }
    Ok(())
}

/// In-place ring all-gather: part `(rank + shift) % n` is this rank's; afterwards every
/// part is filled.
pub fn all_gather(ctx: &OpCtx<'_>, buf: &mut [u8], count: usize, shift: usize) -> CollResult<()> {
    let (n, r) = (ctx.mesh.world(), ctx.mesh.rank());
    let (left, right) = neighbours(r, n);
    let parts = part_ranges(count, n, ctx.dtype.size());
    for s in 0..n - 1 {
        let send_part = (r + 2 * n - s + shift) % n;
        let recv_part = (r + 2 * n - s - 1 + shift) % n;
        let (sb, rb) = split_pair(buf, parts[send_part].clone(), parts[recv_part].clone());
        ctx.exchange(
            &format!("all-gather step {}/{}", s + 1, n - 1),
            Some((right, sb)),
            Some((left, rb, RecvMode::Copy)),
        )?;
    }
    Ok(())
}

/// In-place ring all-reduce.
pub fn all_reduce(ctx: &OpCtx<'_>, buf: &mut [u8], count: usize, op: ReduceOp) -> CollResult<()> {
    let n = ctx.mesh.world();
    reduce_scatter(ctx, buf, count, op, 0)?;
    // After the reduce-scatter rank r owns part (r + 1) % n: all-gather from there.
    all_gather(ctx, buf, count, 1 % n.max(1))
}
