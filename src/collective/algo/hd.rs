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

/// Halving-doubling all-reduce into `buf`, in place or from `src` (`buf`'s length). Out of
/// place, the first step that receives reduces into `buf` from `src` (see
/// `RecvMode::ReduceFrom`) and every later step works within what it wrote, so the
/// input is never copied whole; only the recursive-doubling path for small buffers copies.
pub fn all_reduce(
    ctx: &OpCtx<'_>,
    src: Option<&[u8]>,
    buf: &mut [u8],
    count: usize,
    op: ReduceOp,
) -> CollResult<()> {
    let (n, r) = (ctx.mesh.world(), ctx.mesh.rank());
    let p2 = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let rem = n - p2;
    let mut src = src;
    // Fold the extra ranks into their odd neighbours.
    if r < 2 * rem {
        if r.is_multiple_of(2) {
            ctx.exchange("fold", Some((r + 1, src.unwrap_or(buf))), None)?;
            return ctx.exchange("unfold", None, Some((r + 1, buf, RecvMode::Copy)));
        }
        let mode = RecvMode::reduce(op, src.take());
        ctx.exchange("fold", None, Some((r - 1, &mut *buf, mode)))?;
    }
    let v = if r < 2 * rem { r / 2 } else { r - rem };
    let real = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
    if buf.len() <= RECURSIVE_DOUBLING_MAX {
        if let Some(s) = src {
            buf.copy_from_slice(s);
        }
        let mut theirs = vec![0u8; buf.len()];
        let mut mask = 1;
        while mask < p2 {
            let partner = real(v ^ mask);
            ctx.exchange(
                format!("doubling mask {mask}"),
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
        let (g, k) = (span(give.0, give.1), span(keep.0, keep.1));
        // Out of place, only the first step reads the input: it sends its half from there,
        // and every later step stays within the half it received.
        let (sb, rb, mode) = super::step_parts(buf, src.take(), true, g, k, RecvMode::Reduce(op));
        ctx.exchange(
            format!("halving mask {mask}"),
            Some((partner, sb)),
            Some((partner, rb, mode)),
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
            format!("doubling mask {mask}"),
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

/// The real ranks owned by virtual ranks `[v0, v0 + m)` after the fold, as a contiguous
/// range: virtual v < rem owns real 2v and 2v + 1, the others own v + rem. Consecutive
/// virtual ranks own consecutive real ranks, so a group's blocks are one slice.
fn owned(v0: usize, m: usize, rem: usize) -> std::ops::Range<usize> {
    let first = |v: usize| if v < rem { 2 * v } else { v + rem };
    let last = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
    first(v0)..last(v0 + m - 1) + 1
}

/// Recursive-doubling all-gather: `buf` holds `n` blocks of `block` bytes, this rank's
/// already in place. With p' the largest power of two ≤ n, the first 2(n − p') ranks fold
/// (the even one hands its block to the odd one and waits), the p' active ranks double
/// what they hold at each of log2 p' steps, and the folded ranks get the whole buffer back.
pub fn all_gather(ctx: &OpCtx<'_>, buf: &mut [u8], block: usize) -> CollResult<()> {
    let (n, r) = (ctx.mesh.world(), ctx.mesh.rank());
    let p2 = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let rem = n - p2;
    let bytes = |ranks: std::ops::Range<usize>| ranks.start * block..ranks.end * block;
    if r < 2 * rem {
        if r.is_multiple_of(2) {
            ctx.exchange("fold", Some((r + 1, &buf[bytes(r..r + 1)])), None)?;
            return ctx.exchange("unfold", None, Some((r + 1, buf, RecvMode::Copy)));
        }
        let (_, rb) = super::split_pair(buf, 0..0, bytes(r - 1..r));
        ctx.exchange("fold", None, Some((r - 1, rb, RecvMode::Copy)))?;
    }
    let v = if r < 2 * rem { r / 2 } else { r - rem };
    let real = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
    let mut mask = 1;
    while mask < p2 {
        let partner = v ^ mask;
        let mine = owned(v & !(mask - 1), mask, rem);
        let theirs = owned(partner & !(mask - 1), mask, rem);
        let (sb, rb) = super::split_pair(buf, bytes(mine), bytes(theirs));
        ctx.exchange(
            format!("doubling mask {mask}"),
            Some((real(partner), sb)),
            Some((real(partner), rb, RecvMode::Copy)),
        )?;
        mask <<= 1;
    }
    if r < 2 * rem {
        ctx.exchange("unfold", Some((r - 1, &*buf)), None)?;
    }
    Ok(())
}

/// Recursive-halving reduce-scatter: `buf` holds `n` blocks of `block` bytes; afterwards
/// this rank's block holds the reduction of every rank's block at that position (the rest
/// of `buf` is scratch). The fold is as for [`all_gather`]: the even rank hands its whole
/// buffer to the odd one, which reduces it in, and gets its own block back at the end.
/// The input is `buf` itself or, out of place, `src` (`buf`'s length), read by the first
/// step as in [`all_reduce`].
pub fn reduce_scatter(
    ctx: &OpCtx<'_>,
    src: Option<&[u8]>,
    buf: &mut [u8],
    block: usize,
    op: ReduceOp,
) -> CollResult<()> {
    let (n, r) = (ctx.mesh.world(), ctx.mesh.rank());
    let p2 = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let rem = n - p2;
    let bytes = |ranks: std::ops::Range<usize>| ranks.start * block..ranks.end * block;
    let mut src = src;
    if r < 2 * rem {
        if r.is_multiple_of(2) {
            ctx.exchange("fold", Some((r + 1, src.unwrap_or(buf))), None)?;
            let (_, rb) = super::split_pair(buf, 0..0, bytes(r..r + 1));
            return ctx.exchange("unfold", None, Some((r + 1, rb, RecvMode::Copy)));
        }
        let mode = RecvMode::reduce(op, src.take());
        ctx.exchange("fold", None, Some((r - 1, &mut *buf, mode)))?;
    }
    let v = if r < 2 * rem { r / 2 } else { r - rem };
    let real = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
    let (mut lo, mut hi) = (0, p2);
    let mut mask = p2 / 2;
    while mask > 0 {
        let partner = v ^ mask;
        let mid = (lo + hi) / 2;
        let (keep, give) = if v & mask == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let g = bytes(owned(give.0, give.1 - give.0, rem));
        let k = bytes(owned(keep.0, keep.1 - keep.0, rem));
        let (sb, rb, mode) = super::step_parts(buf, src.take(), true, g, k, RecvMode::Reduce(op));
        ctx.exchange(
            format!("halving mask {mask}"),
            Some((real(partner), sb)),
            Some((real(partner), rb, mode)),
        )?;
        (lo, hi) = keep;
        mask /= 2;
    }
    if r < 2 * rem {
        // This odd rank holds the reductions of blocks r − 1 and r: hand back r − 1's.
        ctx.exchange("unfold", Some((r - 1, &buf[bytes(r - 1..r)])), None)?;
    }
    Ok(())
}
