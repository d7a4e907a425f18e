//! Hierarchical all-reduce, for ranks that share a host (HCCL's decomposition into an
//! intra-server and an inter-server phase).
//!
//! Ranks on one host (same IP address) reduce into the host's leader (its lowest rank),
//! the leaders all-reduce among themselves with the inter-host algorithm (HCCL's
//! `level1`: ring, or recursive doubling for small buffers), and each leader hands the
//! result back to its host. Only one rank per host crosses the network, which is what a
//! real multi-NPU server does with its HCCS-then-RoCE split.

use super::OpCtx;
use super::ring::{self, Pass};
use crate::collective::dtype::{ReduceOp, reduce_into};
use crate::collective::error::CollResult;
use crate::collective::transport::RecvMode;

/// Ranks grouped by host, each group sorted, groups ordered by their leader.
pub fn groups(hosts: &[std::net::IpAddr]) -> Vec<Vec<usize>> {
    let mut out: Vec<(std::net::IpAddr, Vec<usize>)> = Vec::new();
    for (r, ip) in hosts.iter().enumerate() {
        match out.iter_mut().find(|(h, _)| h == ip) {
            Some((_, v)) => v.push(r),
            None => out.push((*ip, vec![r])),
        }
    }
    out.into_iter().map(|(_, v)| v).collect()
}

/// Whether the hierarchical algorithm applies: several hosts, and some host with several
/// ranks.
pub fn applies(groups: &[Vec<usize>]) -> bool {
    groups.len() > 1 && groups.iter().any(|g| g.len() > 1)
}

/// Every peer rank `r` exchanges with (both directions), for sequence numbering.
pub fn peers(r: usize, groups: &[Vec<usize>]) -> Vec<usize> {
    let mine = groups
        .iter()
        .find(|g| g.contains(&r))
        .cloned()
        .unwrap_or_default();
    let leader = mine[0];
    if r != leader {
        return vec![leader];
    }
    let leaders: Vec<usize> = groups.iter().map(|g| g[0]).collect();
    let m = leaders.len();
    let i = leaders.iter().position(|l| *l == r).unwrap_or(0);
    let mut out: Vec<usize> = mine[1..].to_vec();
    out.push(leaders[(i + 1) % m]);
    out.push(leaders[(i + m - 1) % m]);
    out.sort_unstable();
    out.dedup();
    out.retain(|p| *p != r);
    out
}

/// In-place hierarchical all-reduce over host `groups`.
pub fn all_reduce(
    ctx: &OpCtx<'_>,
    groups: &[Vec<usize>],
    buf: &mut [u8],
    count: usize,
    op: ReduceOp,
) -> CollResult<()> {
    let me = ctx.mesh.rank();
    let mine = groups
        .iter()
        .find(|g| g.contains(&me))
        .cloned()
        .unwrap_or_default();
    let leader = mine[0];
    if me != leader {
        ctx.exchange("intra-host reduce", Some((leader, &*buf)), None)?;
        return ctx.exchange(
            "intra-host broadcast",
            None,
            Some((leader, buf, RecvMode::Copy)),
        );
    }
    // Reduce the host's ranks in rank order, so every host computes the same sums.
    let mut theirs = vec![0u8; buf.len()];
    for &m in &mine[1..] {
        ctx.exchange(
            "intra-host reduce",
            None,
            Some((m, &mut theirs, RecvMode::Copy)),
        )?;
        reduce_into(op, ctx.dtype, buf, &theirs);
    }
    let leaders: Vec<usize> = groups.iter().map(|g| g[0]).collect();
    let reduce = Pass {
        members: &leaders,
        shift: 0,
        mode: RecvMode::Reduce(op),
        what: "inter-host reduce-scatter",
        relay: None,
    };
    ring::pass(ctx, reduce, None, buf, count)?;
    let gather = Pass {
        members: &leaders,
        shift: 1,
        mode: RecvMode::Copy,
        what: "inter-host all-gather",
        relay: None,
    };
    ring::pass(ctx, gather, None, buf, count)?;
    for &m in &mine[1..] {
        ctx.exchange("intra-host broadcast", Some((m, &*buf)), None)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping_and_peers() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let hosts = [
            ip("10.0.0.1"),
            ip("10.0.0.1"),
            ip("10.0.0.2"),
            ip("10.0.0.3"),
            ip("10.0.0.2"),
        ];
        let g = groups(&hosts);
        assert_eq!(g, vec![vec![0, 1], vec![2, 4], vec![3]]);
        assert!(applies(&g));
        assert!(!applies(&groups(&[ip("10.0.0.1"); 3])));
        assert!(!applies(&groups(&[ip("10.0.0.1"), ip("10.0.0.2")])));
        assert_eq!(peers(1, &g), vec![0]);
        assert_eq!(peers(0, &g), vec![1, 2, 3]);
        assert_eq!(peers(2, &g), vec![0, 3, 4]);
        assert_eq!(peers(3, &g), vec![0, 2]);
    }
}
