//! Pairs of entities under observation (host-plane links, device-plane port pairs): what
//! each plane keeps per pair while it gathers observations, and the pairs whose verdict is
//! held until a clean observation of the pair, so that a verdict does not flicker while the
//! pair is not measured.

use std::collections::{BTreeMap, BTreeSet};

use super::lifecycle::remap_pair;

/// A pair of entity indices.
pub(crate) type Pair = (usize, usize);

/// Pairs under observation and pairs with a held verdict.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pairs<V> {
    /// Pairs under observation, with what the plane keeps about each.
    pub watched: BTreeMap<Pair, V>,
    /// Pairs with a verdict.
    pub held: BTreeSet<Pair>,
}

impl<V> Default for Pairs<V> {
    fn default() -> Self {
        Pairs {
            watched: BTreeMap::new(),
            held: BTreeSet::new(),
        }
    }
}

impl<V> Pairs<V> {
    /// A clean observation of `pair`: it is no longer watched, and its verdict ends.
    pub fn clean(&mut self, pair: Pair) {
        self.watched.remove(&pair);
        self.held.remove(&pair);
    }

    /// Carries the pairs over to a new index table (`map[old]`: the new index, None: gone);
    /// a pair with an end gone is dropped.
    pub fn remap(&mut self, map: &[Option<usize>]) {
        self.watched = std::mem::take(&mut self.watched)
            .into_iter()
            .filter_map(|(k, v)| Some((remap_pair(map, k)?, v)))
            .collect();
        self.held = std::mem::take(&mut self.held)
            .into_iter()
            .filter_map(|k| remap_pair(map, k))
            .collect();
    }
}
