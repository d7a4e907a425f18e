//! Nonuniform Bruck, HCCL's `NB`: ⌈log2 n⌉ steps for any world size, with no extra volume
//! when n is not a power of two (the halving-doubling fold sends a whole buffer more).
//!
//! All-gather: after step k − 1 rank r holds blocks r … r + 2^k − 1 (mod n). At step k
//! (distance d = 2^k) it sends the first min(d, n − d) of them to r − d and receives as
//! many, starting at r + d, from r + d. Reduce-scatter runs the same schedule backwards,
//! reducing: at each step, from the largest distance down, r sends its partial sums of
//! blocks r + d … to r + d, which adds them to its own. Each contribution reaches its
//! block's owner exactly once. All-reduce is the reduce-scatter followed by the all-gather,
//! on n near-equal parts.
//!
//! Blocks stay at their own place in the buffer; a step's blocks wrap around rank n − 1, so
//! they are packed into one message and unpacked on arrival.
//!
//! HCCL never picks NB by itself; neither does hcclwatch: `HCCL_ALGO=level1:NB` asks for it.

use std::ops::Range;

use super::OpCtx;
use crate::collective::dtype::{ReduceOp, reduce_into};
use crate::collective::error::CollResult;
use crate::collective::transport::RecvMode;

/// Distances 1, 2, 4, … below n.
fn distances(n: usize) -> Vec<usize> {
    (0..usize::BITS)
        .map(|k| 1usize << k)
        .take_while(|d| *d < n)
        .collect()
}

/// Peers rank `r` sends to and receives from in an all-gather (`(sends, recvs)`); a
/// reduce-scatter swaps them, an all-reduce uses both.
pub fn peers(r: usize, n: usize) -> (Vec<usize>, Vec<usize>) {
    let mut to: Vec<usize> = distances(n).iter().map(|d| (r + n - d) % n).collect();
    let mut from: Vec<usize> = distances(n).iter().map(|d| (r + d) % n).collect();
    for v in [&mut to, &mut from] {
        v.sort_unstable();
        v.dedup();
    }
    (to, from)
}

/// The bytes of blocks `first`, `first + 1`, … (`cnt` of them, mod n), in that order.
fn pack(buf: &[u8], blocks: &[Range<usize>], first: usize, cnt: usize) -> Vec<u8> {
    let n = blocks.len();
    let mut out = Vec::new();
    for j in 0..cnt {
        out.extend_from_slice(&buf[blocks[(first + j) % n].clone()]);
    }
    out
}

fn packed_len(blocks: &[Range<usize>], first: usize, cnt: usize) -> usize {
    (0..cnt)
        .map(|j| blocks[(first + j) % blocks.len()].len())
        .sum()
}

/// All-gather of `blocks` (one per rank, this rank's already in place) within `buf`.
pub fn all_gather(ctx: &OpCtx<'_>, buf: &mut [u8], blocks: &[Range<usize>]) -> CollResult<()> {
    let (n, r) = (ctx.mesh.world(), ctx.mesh.rank());
    for d in distances(n) {
        let cnt = d.min(n - d);
        let (to, from) = ((r + n - d) % n, (r + d) % n);
        let out = pack(buf, blocks, r, cnt);
        let mut inc = vec![0u8; packed_len(blocks, from, cnt)];
        ctx.exchange(
            format!("bruck distance {d}"),
            Some((to, &out)),
            Some((from, &mut inc, RecvMode::Copy)),
        )?;
        let mut at = 0;
        for j in 0..cnt {
            let b = blocks[(from + j) % n].clone();
            buf[b.clone()].copy_from_slice(&inc[at..at + b.len()]);
            at += b.len();
        }
    }
    Ok(())
}

/// Reduce-scatter of `blocks` within `buf`: afterwards this rank's block holds the
/// reduction of every rank's; the other blocks are scratch.
pub fn reduce_scatter(
    ctx: &OpCtx<'_>,
    buf: &mut [u8],
    blocks: &[Range<usize>],
    op: ReduceOp,
) -> CollResult<()> {
    let (n, r) = (ctx.mesh.world(), ctx.mesh.rank());
    for d in distances(n).into_iter().rev() {
        let cnt = d.min(n - d);
        let (to, from) = ((r + d) % n, (r + n - d) % n);
        let out = pack(buf, blocks, r + d, cnt);
        let mut inc = vec![0u8; packed_len(blocks, r, cnt)];
        ctx.exchange(
            format!("bruck distance {d}"),
            Some((to, &out)),
            Some((from, &mut inc, RecvMode::Copy)),
        )?;
        let mut at = 0;
        for j in 0..cnt {
            let b = blocks[(r + j) % n].clone();
            reduce_into(op, ctx.dtype, &mut buf[b.clone()], &inc[at..at + b.len()]);
            at += b.len();
        }
    }
    Ok(())
}

/// In-place all-reduce of `count` elements: reduce-scatter then all-gather on n parts.
pub fn all_reduce(ctx: &OpCtx<'_>, buf: &mut [u8], count: usize, op: ReduceOp) -> CollResult<()> {
    let n = ctx.mesh.world();
    let blocks = super::part_ranges(count, n, ctx.dtype.size());
    reduce_scatter(ctx, buf, &blocks, op)?;
    all_gather(ctx, buf, &blocks)
}

/// Equal blocks of `block` bytes for an n-rank all-gather or reduce-scatter.
pub fn equal_blocks(n: usize, block: usize) -> Vec<Range<usize>> {
    (0..n).map(|i| i * block..(i + 1) * block).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_mutual() {
        for n in 1..20 {
            for r in 0..n {
                let (to, _) = peers(r, n);
                for p in to {
                    assert!(peers(p, n).1.contains(&r), "n={n}: {r} sends to {p}");
                }
            }
        }
        assert_eq!(peers(0, 5), (vec![1, 3, 4], vec![1, 2, 4]));
    }
}
