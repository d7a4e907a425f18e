//! Binomial trees for rooted operations: broadcast fans out from the root in ⌈log2 n⌉
//! rounds; reduce fans in along the same tree.

use super::OpCtx;
use crate::collective::dtype::ReduceOp;
use crate::collective::error::CollResult;
use crate::collective::transport::RecvMode;

fn real(v: usize, root: usize, n: usize) -> usize {
    (v + root) % n
}

/// (parent, children) of `rank` in the binomial tree rooted at `root`.
pub fn links(rank: usize, root: usize, n: usize) -> (Option<usize>, Vec<usize>) {
    let v = (rank + n - root) % n;
    let mut parent = None;
    let mut mask = 1;
    while mask < n {
        if v & mask != 0 {
            parent = Some(real(v - mask, root, n));
            break;
        }
        mask <<= 1;
    }
    let mut children = Vec::new();
    let mut m = mask >> 1;
    while m > 0 {
        if v + m < n {
            children.push(real(v + m, root, n));
        }
        m >>= 1;
    }
    (parent, children)
}

/// Binomial broadcast of `buf` from `root`.
pub fn broadcast(ctx: &OpCtx<'_>, buf: &mut [u8], root: usize) -> CollResult<()> {
    let (n, r) = (ctx.mesh.world(), ctx.mesh.rank());
    let (parent, children) = links(r, root, n);
    if let Some(p) = parent {
        ctx.exchange(
            "receive from parent",
            None,
            Some((p, &mut *buf, RecvMode::Copy)),
        )?;
    }
    for c in children {
        ctx.exchange("send to child", Some((c, &*buf)), None)?;
    }
    Ok(())
}

/// Binomial reduce of `buf` into `root` (in place; only the root's result is complete).
pub fn reduce(ctx: &OpCtx<'_>, buf: &mut [u8], op: ReduceOp, root: usize) -> CollResult<()> {
    let (n, r) = (ctx.mesh.world(), ctx.mesh.rank());
    let (parent, mut children) = links(r, root, n);
    // Fan in from the deepest subtree first (the reverse of the broadcast order).
    children.reverse();
    for c in children {
        ctx.exchange(
            "reduce from child",
            None,
            Some((c, &mut *buf, RecvMode::Reduce(op))),
        )?;
    }
    if let Some(p) = parent {
        ctx.exchange("send to parent", Some((p, &*buf)), None)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_but_the_root_has_one_parent_and_trees_are_consistent() {
        for n in 1..20 {
            for root in 0..n {
                let mut child_count = vec![0; n];
                for r in 0..n {
                    let (p, kids) = links(r, root, n);
                    assert_eq!(p.is_none(), r == root, "n={n} root={root} r={r}");
                    for k in kids {
                        assert_eq!(links(k, root, n).0, Some(r));
                        child_count[k] += 1;
                    }
                }
                for (r, count) in child_count.iter().enumerate() {
                    assert_eq!(*count, usize::from(r != root));
                }
            }
        }
    }
}
