//! How well the ToR inference ([`crate::health::TorInference`]) found the ToRs: its
//! groups at the end of the run against the fleet's true ToRs.
//!
//! Scored by pairs of nodes: a pair the inference put in one group is *right* when both
//! nodes are behind one ToR. Precision is the share of the inferred pairs that are right
//! (a wrong group costs it); recall the share of the same-ToR pairs the inference could
//! have found (both nodes in one probe group, since each group infers alone) that it did.
//! A ToR that was never slow cannot be found, so recall says as much about the scenario's
//! events as about the inference; precision is what must stay high, and a run that infers
//! nothing has no precision to judge (`None`), never a made-up one.

use serde::Serialize;

use super::topology::Topology;

/// The inference's accuracy in one run (or pooled over runs).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct InferenceAccuracy {
    /// Groups inferred.
    pub groups: usize,
    /// Groups whose nodes are all behind one ToR.
    pub pure_groups: usize,
    /// Nodes in some group.
    pub nodes_placed: usize,
    /// Node pairs inferred to share a ToR.
    pub pairs_inferred: usize,
    /// Of those, pairs that do.
    pub pairs_right: usize,
    /// Pairs of nodes behind one ToR and in one probe group.
    pub pairs_same_tor: usize,
    /// `pairs_right / pairs_inferred`; `None` when nothing was inferred.
    pub precision: Option<f64>,
    /// `pairs_right / pairs_same_tor`; `None` when no pair shares a ToR.
    pub recall: Option<f64>,
    /// The groups (global node numbers); empty in a pooled report.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inferred: Vec<Vec<usize>>,
}

impl InferenceAccuracy {
    /// Sets the ratios from the counts.
    fn ratios(mut self) -> Self {
        let ratio = |a: usize, b: usize| (b > 0).then(|| a as f64 / b as f64);
        self.precision = ratio(self.pairs_right, self.pairs_inferred);
        self.recall = ratio(self.pairs_right, self.pairs_same_tor);
        self
    }

    /// The counts of several runs summed, the ratios over the sums.
    pub fn pooled<'a>(runs: impl IntoIterator<Item = &'a InferenceAccuracy>) -> Option<Self> {
        let mut any = false;
        let mut p = Self::default();
        for r in runs {
            any = true;
            p.groups += r.groups;
            p.pure_groups += r.pure_groups;
            p.nodes_placed += r.nodes_placed;
            p.pairs_inferred += r.pairs_inferred;
            p.pairs_right += r.pairs_right;
            p.pairs_same_tor += r.pairs_same_tor;
        }
        any.then(|| p.ratios())
    }
}

/// The accuracy of `inferred` (groups of global node numbers) on `topo`; `None` when the
/// fleet has no ToR of two or more nodes (nothing to infer).
pub fn measure(inferred: &[Vec<usize>], topo: &Topology) -> Option<InferenceAccuracy> {
    if topo.tor_size < 2 || topo.nodes < 2 {
        return None;
    }
    let pairs = |k: usize| k * k.saturating_sub(1) / 2;
    let mut a = InferenceAccuracy::default();
    for g in &topo.groups {
        let mut per_tor = std::collections::BTreeMap::<usize, usize>::new();
        for &n in g {
            *per_tor.entry(topo.tor(n)).or_default() += 1;
        }
        a.pairs_same_tor += per_tor.values().map(|&k| pairs(k)).sum::<usize>();
    }
    for g in inferred {
        a.groups += 1;
        a.nodes_placed += g.len();
        a.pairs_inferred += pairs(g.len());
        let mut per_tor = std::collections::BTreeMap::<usize, usize>::new();
        for &n in g {
            *per_tor.entry(topo.tor(n)).or_default() += 1;
        }
        a.pairs_right += per_tor.values().map(|&k| pairs(k)).sum::<usize>();
        a.pure_groups += usize::from(per_tor.len() == 1);
    }
    a.inferred = inferred.to_vec();
    Some(a.ratios())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 12 nodes in one probe group, ToRs of 4: {0–3}, {4–7}, {8–11}.
    fn topo() -> Topology {
        let s: super::super::Scenario = toml::from_str(
            "name = \"t\"\n[fleet]\nnodes = 12\ngroup_size = 64\ntor_size = 4\nrounds = 10\n",
        )
        .expect("scenario");
        Topology::new(&s)
    }

    #[test]
    fn pairs_are_scored_against_the_true_tors() {
        let t = topo();
        // One right group (ToR 0, 6 pairs), one that mixes ToR 1 and 2 (10 pairs, 3 + 1
        // right).
        let a = measure(&[vec![0, 1, 2, 3], vec![4, 5, 6, 8, 9]], &t).expect("has ToRs");
        assert_eq!(a.groups, 2);
        assert_eq!(a.pure_groups, 1);
        assert_eq!(a.nodes_placed, 9);
        assert_eq!(a.pairs_inferred, 16);
        assert_eq!(a.pairs_right, 10);
        assert_eq!(a.pairs_same_tor, 18);
        assert_eq!(a.precision, Some(10.0 / 16.0));
        assert_eq!(a.recall, Some(10.0 / 18.0));
    }

    #[test]
    fn nothing_inferred_has_no_precision() {
        let a = measure(&[], &topo()).expect("has ToRs");
        assert_eq!(a.precision, None);
        assert_eq!(a.recall, Some(0.0));
        let pooled = InferenceAccuracy::pooled([&a, &a]).expect("two runs");
        assert_eq!(pooled.pairs_same_tor, 36);
        assert!(pooled.inferred.is_empty());
        assert_eq!(pooled.precision, None);
    }
}
