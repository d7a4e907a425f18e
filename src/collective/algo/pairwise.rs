//! Pairwise exchange for all-to-all: in step k every rank sends to rank + k and receives
//! from rank − k, so each step is a permutation (one flow in, one flow out per rank) and
//! no receiver suffers incast. Also the dissemination barrier, which has the same shape
//! with strides 1, 2, 4, ….

use super::OpCtx;
use crate::collective::error::CollResult;
use crate::collective::transport::RecvMode;

/// All-to-all: block `p` of `send` goes to rank `p`; block `p` of `recv` comes from it.
pub fn all_to_all(ctx: &OpCtx<'_>, send: &[u8], recv: &mut [u8], block: usize) -> CollResult<()> {
    let (n, r) = (ctx.mesh.world(), ctx.mesh.rank());
    recv[r * block..(r + 1) * block].copy_from_slice(&send[r * block..(r + 1) * block]);
    for k in 1..n {
        let to = (r + k) % n;
        let from = (r + n - k) % n;
        ctx.exchange(
            format!("pairwise step {k}/{}", n - 1),
            Some((to, &send[to * block..(to + 1) * block])),
            Some((
                from,
                &mut recv[from * block..(from + 1) * block],
                RecvMode::Copy,
            )),
        )?;
    }
    Ok(())
}

/// Peers of a dissemination barrier: (send-to, receive-from) per round.
pub fn barrier_rounds(r: usize, n: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut k = 1;
    while k < n {
        out.push(((r + k) % n, (r + n - k) % n));
        k *= 2;
    }
    out
}

/// Dissemination barrier: ⌈log2 n⌉ rounds of one-byte messages.
pub fn barrier(ctx: &OpCtx<'_>) -> CollResult<()> {
    let (n, r) = (ctx.mesh.world(), ctx.mesh.rank());
    for (i, (to, from)) in barrier_rounds(r, n).into_iter().enumerate() {
        let mut token = [0u8; 1];
        ctx.exchange(
            format!("barrier round {}", i + 1),
            Some((to, &[1u8])),
            Some((from, &mut token, RecvMode::Copy)),
        )?;
    }
    Ok(())
}
