//! Carrying what the engine learnt of each ToR over to new ToR numbers.
//!
//! The daemon numbers a group's ToRs by their place among the names its members share at
//! formation (`probe::tors::tor_table`), so a ToR that appears or goes (its only member
//! left the group, or one joined behind a new switch) shifts the numbers of every ToR
//! after it, while the members themselves keep their indices. Left as they were, the
//! learned normal of one switch would judge another (a ToR slow for hours, its level
//! long since the normal, would hand that normal to a healthy neighbour and take a fresh
//! one itself: its old slowness a new verdict), and its history, hold and uplinks mark
//! with it. The engine reads the renumbering from the members: a ToR keeps what it
//! learnt under its new number when every member known under both numberings moved
//! from it to that number and no other ToR's did; anything less (a member moved between
//! switches, two merged) drops the ToR's track, learnt afresh. Deterministic from the
//! rounds' inputs alone, as the device plane's `renumber_switches` is.

use std::collections::{BTreeMap, BTreeSet};

use super::TorWatch;

/// The ToR numbers of `old` (by node) that name the same ToR in `new`: each old number
/// whose members known in both (`Some` in both) all carry one new number that no other
/// old number's members carry. Old numbers missing from the map name no ToR of `new`.
pub(crate) fn renumbering(old: &[Option<u32>], new: &[Option<u32>]) -> BTreeMap<u32, u32> {
    let mut to: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    let mut from: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for (a, b) in old.iter().zip(new) {
        if let (Some(a), Some(b)) = (*a, *b) {
            to.entry(a).or_default().insert(b);
            from.entry(b).or_default().insert(a);
        }
    }
    to.into_iter()
        .filter_map(|(a, news)| {
            let mut it = news.into_iter();
            let b = it.next()?;
            let one_to_one = it.next().is_none() && from.get(&b).is_some_and(|o| o.len() == 1);
            one_to_one.then_some((a, b))
        })
        .collect()
}

/// The ToR pair `(a, b)` under the new numbers `map` (see [`renumbering`]), lower first;
/// None when `map` does not carry either end.
pub(crate) fn renumbered_pair(map: &BTreeMap<u32, u32>, (a, b): (u32, u32)) -> Option<(u32, u32)> {
    let (a, b) = (*map.get(&a)?, *map.get(&b)?);
    Some((a.min(b), a.max(b)))
}

impl TorWatch {
    /// Moves each ToR's track (normal, history, hold, uplinks mark), a small ToR's
    /// history and the zero a group of two ToRs measured to their new numbers
    /// (`map`: see [`renumbering`]); what `map` does not carry is dropped.
    pub(crate) fn renumber(&mut self, map: &BTreeMap<u32, u32>) {
        let moved = |t: &u32| map.get(t).copied();
        self.tracks = std::mem::take(&mut self.tracks)
            .into_iter()
            .filter_map(|(t, track)| Some((moved(&t)?, track)))
            .collect();
        self.whole = std::mem::take(&mut self.whole)
            .into_iter()
            .filter_map(|(t, track)| Some((moved(&t)?, track)))
            .collect();
        self.pair = self.pair.take().and_then(|mut p| {
            p.tors = renumbered_pair(map, p.tors)?;
            Some(p)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first ToR's only member left: the two after it shift down by one, and each
    /// keeps its own members, so each maps to its new number; the gone one to nothing.
    #[test]
    fn a_tor_gone_shifts_the_numbers_after_it() {
        let old = [Some(0), Some(1), Some(1), Some(2), Some(2)];
        let new = [None, Some(0), Some(0), Some(1), Some(1)];
        assert_eq!(renumbering(&old, &new), BTreeMap::from([(1, 0), (2, 1)]));
    }

    /// A member that moved to another switch makes both ToRs' numbers ambiguous: neither
    /// is carried over. A ToR untouched is carried as it is.
    #[test]
    fn a_member_that_moved_drops_both_tors_it_joins() {
        let old = [Some(0), Some(0), Some(1), Some(1), Some(2)];
        let new = [Some(0), Some(1), Some(1), Some(1), Some(2)];
        assert_eq!(renumbering(&old, &new), BTreeMap::from([(2, 2)]));
        // Two ToRs that now share one number (their names merged) are neither.
        let new = [Some(0), Some(0), Some(0), Some(0), Some(1)];
        assert_eq!(renumbering(&old, &new), BTreeMap::from([(2, 1)]));
    }

    /// Members whose place is unknown in either numbering say nothing; a ToR known only
    /// by members unknown now is not carried.
    #[test]
    fn unknown_places_say_nothing() {
        let old = [Some(0), None, Some(1), Some(1)];
        let new = [Some(5), Some(4), None, None];
        assert_eq!(renumbering(&old, &new), BTreeMap::from([(0, 5)]));
        assert!(renumbering(&[], &new).is_empty());
    }
}
