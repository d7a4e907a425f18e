//! Algorithm selection: an α-β cost comparison, or an explicit `HCCL_ALGO` override.
//!
//! α (per-message latency) and β (seconds per byte) are measured when the communicator
//! starts. For all-reduce the costs of HCCL's published formulas are compared and the
//! cheaper algorithm is used, ties going to ring as in HCCL. `HCCL_ALGO` uses HCCL's
//! syntax: `level0:NA;level1:ring` for every operation, or the per-operation form
//! `allreduce=level0:NA;level1:H-D_R/allgather=level0:NA;level1:ring`.

use std::collections::HashMap;

/// Algorithms this engine implements for all-reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    /// Ring reduce-scatter + all-gather.
    Ring,
    /// Recursive halving-doubling (HCCL `H-D_R`).
    HalvingDoubling,
    /// Intra-host reduce, inter-host ring, intra-host broadcast (ranks sharing hosts).
    Hierarchical,
    /// Nonuniform Bruck (HCCL `NB`): ⌈log2 n⌉ steps at any n; only when asked for.
    Bruck,
}

impl Algo {
    /// HCCL's token.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Ring => "ring",
            Algo::HalvingDoubling => "H-D_R",
            Algo::Hierarchical => "hierarchical",
            Algo::Bruck => "NB",
        }
    }
}

/// Measured link costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// Seconds per message.
    pub alpha: f64,
    /// Seconds per byte.
    pub beta: f64,
}

/// Predicted all-reduce time of `algo` for `bytes` on `n` ranks (HCCL's formulas, without
/// the reduction term, which is the same for both).
pub fn allreduce_cost(algo: Algo, n: usize, bytes: usize, c: Costs) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let (nf, b) = (n as f64, bytes as f64);
    match algo {
        // Not compared by cost: chosen whenever ranks share hosts (see comm.rs).
        Algo::Hierarchical => f64::INFINITY,
        Algo::Ring => 2.0 * (nf - 1.0) * c.alpha + 2.0 * ((nf - 1.0) / nf) * b * c.beta,
        Algo::Bruck => {
            let steps = f64::from(usize::BITS - (n - 1).leading_zeros());
            2.0 * steps * c.alpha + 2.0 * ((nf - 1.0) / nf) * b * c.beta
        }
        Algo::HalvingDoubling => {
            let lg = (usize::BITS - 1 - n.leading_zeros()) as f64;
            if bytes <= super::hd::RECURSIVE_DOUBLING_MAX {
                // Recursive doubling, plus the fold and unfold when n is not a power of two.
                let fold = if n.is_power_of_two() {
                    0.0
                } else {
                    2.0 * (c.alpha + b * c.beta)
                };
                return lg * (c.alpha + b * c.beta) + fold;
            }
            if n.is_power_of_two() {
                2.0 * lg * c.alpha + 2.0 * ((nf - 1.0) / nf) * b * c.beta
            } else {
                let p2 = 2f64.powf(lg);
                (2.0 * lg + 2.0) * c.alpha + (2.0 * (p2 - 1.0) / p2 + 2.0) * b * c.beta
            }
        }
    }
}

/// The largest share of an all-reduce's bandwidth time that slicing it may add as
/// latency: every slice pays the algorithm's per-step latency again.
pub const SLICE_LATENCY_SHARE: f64 = 0.1;

/// The smallest slice of an all-reduce by `algo` on `n` ranks whose latency term is at
/// most [`SLICE_LATENCY_SHARE`] of its bandwidth term, by the α-β model. On loopback
/// (α ≈ 10 µs, 1–2 GB/s) that is well under 1 MiB at 2 and 4 ranks; across 64 hosts
/// (α = 50 µs, 10 GB/s) about 30 MB, so a large slow-link all-reduce is not cut into slices
/// that would each wait out 12 round trips. `usize::MAX` where the model has no figure.
pub fn min_slice(algo: Algo, n: usize, c: Costs) -> usize {
    // Above the recursive-doubling limit every cost is affine in the size: L + k·bytes.
    let b = 1usize << 20;
    let (one, two) = (
        allreduce_cost(algo, n, b, c),
        allreduce_cost(algo, n, 2 * b, c),
    );
    let per_byte = (two - one) / b as f64;
    let latency = one - per_byte * b as f64;
    let bytes = latency / (SLICE_LATENCY_SHARE * per_byte);
    if bytes.is_finite() && bytes >= 0.0 {
        // A float above usize::MAX saturates.
        bytes.ceil() as usize
    } else {
        usize::MAX
    }
}

/// Predicted time of an all-gather or a reduce-scatter of `bytes` in all (n blocks) by
/// `algo`: the ring takes n − 1 steps of one block, recursive doubling (or halving) log2 p'
/// steps moving the same bytes in all, plus the fold and unfold when n is not a power of
/// two (one block in, the whole buffer or one block back); Bruck ⌈log2 n⌉ steps with the
/// ring's bytes. The hierarchical algorithm runs as a ring for these operations.
pub fn gather_cost(algo: Algo, n: usize, bytes: usize, c: Costs) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let (nf, b) = (n as f64, bytes as f64);
    match algo {
        Algo::Bruck => {
            let steps = f64::from(usize::BITS - (n - 1).leading_zeros());
            steps * c.alpha + (nf - 1.0) / nf * b * c.beta
        }
        Algo::HalvingDoubling => {
            let lg = (usize::BITS - 1 - n.leading_zeros()) as f64;
            let p2 = 2f64.powf(lg);
            let fold = if n.is_power_of_two() {
                0.0
            } else {
                2.0 * c.alpha + (b / nf + b) * c.beta
            };
            lg * c.alpha + (p2 - 1.0) / p2 * b * c.beta + fold
        }
        _ => (nf - 1.0) * c.alpha + (nf - 1.0) / nf * b * c.beta,
    }
}

/// The cheaper all-gather / reduce-scatter algorithm; ties go to ring.
pub fn choose_gather(n: usize, bytes: usize, c: Costs) -> Algo {
    if gather_cost(Algo::HalvingDoubling, n, bytes, c) < gather_cost(Algo::Ring, n, bytes, c) {
        Algo::HalvingDoubling
    } else {
        Algo::Ring
    }
}

/// The cheaper all-reduce algorithm; ties go to ring.
pub fn choose_allreduce(n: usize, bytes: usize, c: Costs) -> Algo {
    let ring = allreduce_cost(Algo::Ring, n, bytes, c);
    let hd = allreduce_cost(Algo::HalvingDoubling, n, bytes, c);
    if hd < ring {
        Algo::HalvingDoubling
    } else {
        Algo::Ring
    }
}

/// A parsed `HCCL_ALGO` value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Override {
    /// Applies to every operation.
    pub global: Option<Algo>,
    /// Per operation (`allreduce`, `allgather`, …).
    pub per_op: HashMap<String, Algo>,
}

impl Override {
    /// The algorithm forced for `op`, if any.
    pub fn for_op(&self, op: &str) -> Option<Algo> {
        self.per_op.get(op).copied().or(self.global)
    }
}

const HCCL_TOKENS: &[&str] = &[
    "null",
    "ring",
    "pipeline",
    "fullmesh",
    "H-D_R",
    "pairwise",
    "NHR",
    "NHR_V1",
    "AHC",
    "AHC_BROKE",
    "NB",
    "NA",
];
const HCCL_OPS: &[&str] = &[
    "broadcast",
    "allreduce",
    "reduce",
    "send",
    "receive",
    "allgather",
    "reducescatter",
    "alltoall",
    "gather",
    "scatter",
    "sendrecv",
    "others",
];

/// Why an `HCCL_ALGO` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlgoError {
    /// A `;`-separated part lacks the `levelN:` prefix.
    #[error("{part:?} is not `levelN:<algo>`")]
    NotLevelForm {
        /// The part.
        part: String,
    },
    /// The level is not level0..level3.
    #[error("unknown level {level:?}; use level0..level3")]
    UnknownLevel {
        /// The level given.
        level: String,
    },
    /// The algorithm is not an HCCL token.
    #[error("algo {algo:?} is not supported; HCCL accepts {}", HCCL_TOKENS.join(", "))]
    UnknownAlgo {
        /// The algorithm given.
        algo: String,
    },
    /// HCCL knows the level-1 algorithm, this engine does not run it.
    #[error(
        "level1:{algo} is valid HCCL but not implemented by hcclwatch's TCP engine; use ring, H-D_R or NB"
    )]
    NotImplemented {
        /// The algorithm given.
        algo: String,
    },
    /// `op=levels` items mixed with a bare global setting.
    #[error("{item:?}: the global and per-operation forms cannot be mixed")]
    MixedForms {
        /// The item without `=`.
        item: String,
    },
    /// The operation is not an HCCL operation name.
    #[error("unknown operation {op:?}; HCCL accepts {}", HCCL_OPS.join(", "))]
    UnknownOp {
        /// The operation given.
        op: String,
    },
}

fn parse_levels(s: &str) -> Result<Option<Algo>, AlgoError> {
    let mut level1 = None;
    for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (level, algo) = part
            .split_once(':')
            .ok_or_else(|| AlgoError::NotLevelForm { part: part.into() })?;
        if !matches!(level, "level0" | "level1" | "level2" | "level3") {
            return Err(AlgoError::UnknownLevel {
                level: level.into(),
            });
        }
        if !HCCL_TOKENS.contains(&algo) {
            return Err(AlgoError::UnknownAlgo { algo: algo.into() });
        }
        match (level, algo) {
            ("level1", "ring") => level1 = Some(Algo::Ring),
            ("level1", "AHC" | "AHC_BROKE" | "pipeline") => level1 = Some(Algo::Hierarchical),
            ("level1", "H-D_R") => level1 = Some(Algo::HalvingDoubling),
            ("level1", "NB") => level1 = Some(Algo::Bruck),
            ("level1", "null" | "NA") | ("level0" | "level2" | "level3", _) => {}
            ("level1", other) => {
                return Err(AlgoError::NotImplemented { algo: other.into() });
            }
            _ => {}
        }
    }
    Ok(level1)
}

/// Parses `HCCL_ALGO`.
pub fn parse_hccl_algo(s: &str) -> Result<Override, AlgoError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(Override::default());
    }
    if !s.contains('=') {
        return Ok(Override {
            global: parse_levels(s)?,
            per_op: HashMap::new(),
        });
    }
    let mut per_op = HashMap::new();
    for item in s.split('/') {
        let (op, levels) = item
            .split_once('=')
            .ok_or_else(|| AlgoError::MixedForms { item: item.into() })?;
        let op = op.trim();
        if !HCCL_OPS.contains(&op) {
            return Err(AlgoError::UnknownOp { op: op.into() });
        }
        if let Some(a) = parse_levels(levels)? {
            per_op.insert(op.to_string(), a);
        }
    }
    Ok(Override {
        global: None,
        per_op,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms() {
        assert_eq!(
            parse_hccl_algo("level0:NA;level1:ring").unwrap().global,
            Some(Algo::Ring)
        );
        let o = parse_hccl_algo("allreduce=level0:NA;level1:H-D_R/allgather=level0:NA;level1:ring")
            .unwrap();
        assert_eq!(o.for_op("allreduce"), Some(Algo::HalvingDoubling));
        assert_eq!(o.for_op("allgather"), Some(Algo::Ring));
        assert_eq!(o.for_op("broadcast"), None);
        assert!(
            parse_hccl_algo("level1:Adapt")
                .unwrap_err()
                .to_string()
                .contains("not supported")
        );
        assert!(
            parse_hccl_algo("level1:NHR")
                .unwrap_err()
                .to_string()
                .contains("not implemented")
        );
        assert!(
            parse_hccl_algo("level9:ring")
                .unwrap_err()
                .to_string()
                .contains("unknown level")
        );
        assert!(
            parse_hccl_algo("allreduce=level1:ring/level1:ring")
                .unwrap_err()
                .to_string()
                .contains("cannot be mixed")
        );
        assert!(
            parse_hccl_algo("allsum=level1:ring")
                .unwrap_err()
                .to_string()
                .contains("unknown operation")
        );
    }

    #[test]
    fn cost_model_prefers_hd_for_latency_and_ring_for_odd_sizes_at_bandwidth() {
        let c = Costs {
            alpha: 50e-6,
            beta: 1.0 / 1e9,
        };
        assert_eq!(choose_allreduce(8, 8, c), Algo::HalvingDoubling);
        // Non-power-of-two: HD moves more bytes, so ring wins for large buffers.
        assert_eq!(choose_allreduce(6, 64 << 20, c), Algo::Ring);
        // Two ranks, large buffer: identical costs, tie goes to ring.
        assert_eq!(choose_allreduce(2, 1 << 20, c), Algo::Ring);
        // Two ranks, small buffer: recursive doubling is one step instead of two.
        assert_eq!(choose_allreduce(2, 64, c), Algo::HalvingDoubling);
        assert_eq!(allreduce_cost(Algo::Ring, 1, 100, c), 0.0);
    }

    #[test]
    fn slices_stay_above_the_latency_floor() {
        let loopback = Costs {
            alpha: 10e-6,
            beta: 1.0 / 1.5e9,
        };
        // H-D at 4 ranks: 4α of latency against 1.5·β per byte → 4α / (0.1 · 1.5β).
        let want = 4.0 * 10e-6 / (SLICE_LATENCY_SHARE * 1.5 / 1.5e9);
        let got = min_slice(Algo::HalvingDoubling, 4, loopback);
        assert!((got as f64 - want).abs() <= 2.0, "{got} vs {want}");
        assert!(got < 1 << 20, "{got}");
        // The ring at 4 ranks: 6 steps instead of 4.
        assert!(min_slice(Algo::Ring, 4, loopback) > got);
        let fabric = Costs {
            alpha: 50e-6,
            beta: 1.0 / 10e9,
        };
        let big = min_slice(Algo::HalvingDoubling, 64, fabric);
        assert!(big > 16 << 20 && big < 64 << 20, "{big}");
        // Neither a world of one nor the hierarchical algorithm has a cost figure: never
        // sliced.
        assert_eq!(min_slice(Algo::Ring, 1, fabric), usize::MAX);
        assert_eq!(min_slice(Algo::Hierarchical, 4, fabric), usize::MAX);
    }

    #[test]
    fn gather_cost_prefers_doubling_for_latency_and_ring_when_the_fold_costs_bandwidth() {
        let c = Costs {
            alpha: 50e-6,
            beta: 1.0 / 1e9,
        };
        // 8 ranks, small: 3 steps instead of 7.
        assert_eq!(choose_gather(8, 1024, c), Algo::HalvingDoubling);
        // 8 ranks, large: the same bytes, fewer steps: doubling still wins, barely.
        assert_eq!(choose_gather(8, 64 << 20, c), Algo::HalvingDoubling);
        // 6 ranks, large: the fold sends the whole buffer once more.
        assert_eq!(choose_gather(6, 64 << 20, c), Algo::Ring);
        // 2 ranks: identical, the tie goes to ring.
        assert_eq!(choose_gather(2, 1 << 20, c), Algo::Ring);
        assert_eq!(gather_cost(Algo::Ring, 1, 100, c), 0.0);
    }
}
