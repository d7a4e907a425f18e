//! Recursive halving-doubling all-reduce (Rabenseifner), HCCL's `H-D_R`.
//!
//! With p' the largest power of two ≤ n, the first 2(n−p') ranks fold pairwise (the even
//! one hands its data to the odd one and sits out), the p' active ranks reduce-scatter by
//! recursive halving and all-gather by recursive doubling (log2 p' steps each), and the
//! folded ranks get the result back. Latency grows with log2 n instead of n.
//!
//! Buffers of at most [`RECURSIVE_DOUBLING_MAX`] bytes skip the halving: the active ranks
//! exchange the whole buffer at each of the log2 p' steps (recursive doubling), which
//! halves the number of dependent steps, the cost that dominates small messages.

/// Largest buffer reduced by plain recursive doubling.
pub const RECURSIVE_DOUBLING_MAX: usize = 16 * 1024;

use super::{OpCtx, part_ranges};
use crate::collective::dtype::ReduceOp;
use crate::collective::error::CollResult;
use crate::collective::transport::RecvMode;

/// Peers rank `r` talks to in an `n`-rank halving-doubling (for sequence numbering).
pub fn peers(r: usize, n: usize) -> Vec<usize> {
    let p2 = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let rem = n - p2;
    let mut out = Vec::new();
    if r < 2 * rem {
        out.push(r ^ 1);
        if r.is_multiple_of(2) {
            return out;
        }
    }
    let v = if r < 2 * rem { r / 2 } else { r - rem };
    let real = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
    let mut mask = 1;
    while mask < p2 {
        out.push(real(v ^ mask));
        mask <<= 1;
    }
    out
}

/// In-place halving-doubling all-reduce.
pub fn all_reduce(ctx: &OpCtx<'_>, buf: &mut [u8], count: usize, op: ReduceOp) -> CollResult<()> {
    let (n, r) = (ctx.mesh.world(), ctx.mesh.rank());
    let p2 = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let rem = n - p2;
    // Fold the extra ranks into their odd neighbours.
    if r < 2 * rem {
        if r.is_multiple_of(2) {
            ctx.exchange("fold", Some((r + 1, &*buf)), None)?;
            return ctx.exchange("unfold", None, Some((r + 1, buf, RecvMode::Copy)));
        }
        ctx.exchange("fold", None, Some((r - 1, &mut *buf, RecvMode::Reduce(op))))?;
    }
    let v = if r < 2 * rem { r / 2 } else { r - rem };
    let real = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
    if buf.len() <= RECURSIVE_DOUBLING_MAX {
        let mut theirs = vec![0u8; buf.len()];
        let mut mask = 1;
        while mask < p2 {
            let partner = real(v ^ mask);
            ctx.exchange(
                &format!("doubling mask {mask}"),
                Some((partner, &*buf)),
                Some((partner, &mut theirs, RecvMode::Copy)),
            )?;
            // Reduce in rank order so both partners compute bit-identical results.
            if partner < r {
                crate::collective::dtype::reduce_into(op, ctx.dtype, &mut theirs, buf);
                buf.copy_from_slice(&theirs);
            } else {
                crate::collective::dtype::reduce_into(op, ctx.dtype, buf, &theirs);
            }
            mask <<= 1;
        }
        if r < 2 * rem {
            ctx.exchange("unfold", Some((r - 1, &*buf)), None)?;
        }
        return Ok(());
    }
    let parts = part_ranges(count, p2, ctx.dtype.size());
    let span = |lo: usize, hi: usize| parts[lo].start..parts[hi - 1].end;
    // Reduce-scatter by recursive halving: keep the half named by our bit.
    let (mut lo, mut hi) = (0, p2);
    let mut mask = p2 / 2;
    let mut history = Vec::new();
    while mask > 0 {
        let partner = real(v ^ mask);
        let mid = (lo + hi) / 2;
        let (keep, give) = if v & mask == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let (sb, rb) = super::split_pair(buf, span(give.0, give.1), span(keep.0, keep.1));
        ctx.exchange(
            &format!("halving mask {mask}"),
            Some((partner, sb)),
            Some((partner, rb, RecvMode::Reduce(op))),
        )?;
        history.push((mask, give));
        (lo, hi) = keep;
        mask /= 2;
    }
    // All-gather by recursive doubling, retracing the halving steps.
    while let Some((mask, give)) = history.pop() {
        let partner = real(v ^ mask);
        let (sb, rb) = super::split_pair(buf, span(lo, hi), span(give.0, give.1));
        ctx.exchange(
            &format!("doubling mask {mask}"),
            Some((partner, sb)),
            Some((partner, rb, RecvMode::Copy)),
        )?;
        lo = lo.min(give.0);
        hi = hi.max(give.1);
    }
    if r < 2 * rem {
        ctx.exchange("unfold", Some((r - 1, &*buf)), None)?;
    }
    Ok(())
}
