//! The lifecycle every judged entity goes through, nodes on the host plane and NPU ports on
//! the device plane alike:
//!
//! ```text
//! healthy → suspect → confirmed → quarantine_recommended → probation → healthy
//! ```
//!
//! A [`Track`] holds an entity's state, the round it entered it and the hysteresis counters
//! (rounds in a row within bounds, rounds in a row steadily elevated, and of those the ones
//! nothing else explains), beside whatever the plane keeps about the entity. A [`Lifecycle`]
//! holds the tracks of one group, indexed by the plane's own index type ([`NodeIx`],
//! [`PortIx`]), counts the rounds and records every state change as a [`Change`] with its
//! reason and evidence. Each plane decides *when* to move; moving is done here, once.

use std::marker::PhantomData;

use super::evidence::Evidence;
use crate::snapshot::probe::NodeState;

/// An index into a plane's entities.
pub(crate) trait Ix: Copy {
    /// The plain index.
    fn ix(self) -> usize;
}

/// A node's index in its probe group (the host-plane engine's entities, and the owners of
/// the device plane's ports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeIx(pub usize);

/// An NPU port's index in the device-plane engine's port table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortIx(pub usize);

impl Ix for NodeIx {
    fn ix(self) -> usize {
        self.0
    }
}

impl Ix for PortIx {
    fn ix(self) -> usize {
        self.0
    }
}

/// Hysteresis counters, reset by every state change.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Counts {
    /// Rounds in a row within bounds (what leaving a state waits for).
    pub clean: usize,
    /// Rounds in a row steadily elevated (what a quarantine waits for).
    pub steady: usize,
    /// Of the `steady` rounds, those nothing else explained (no congestion reported by the
    /// entity's own uplink).
    pub quiet: usize,
}

impl Counts {
    /// Counts a round within bounds (`true`) or not.
    pub fn within(&mut self, yes: bool) {
        self.clean = if yes { self.clean + 1 } else { 0 };
    }

    /// Counts a round steadily elevated (`true`, `explained` when something other than the
    /// entity accounts for it) or not (the run starts over).
    pub fn steady_round(&mut self, yes: bool, explained: bool) {
        if yes {
            self.steady += 1;
            self.quiet += usize::from(!explained);
        } else {
            self.steady = 0;
            self.quiet = 0;
        }
    }
}

/// One entity's lifecycle, and what its plane keeps about it (`data`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Track<D> {
    /// Current state.
    pub state: NodeState,
    /// Round it entered that state.
    pub since: u64,
    /// Hysteresis counters.
    pub counts: Counts,
    /// The plane's own per-entity data (windows, confirmations).
    pub data: D,
}

impl<D> Track<D> {
    /// A healthy entity that has seen nothing.
    pub fn new(data: D) -> Self {
        Track {
            state: NodeState::Healthy,
            since: 0,
            counts: Counts::default(),
            data,
        }
    }

    /// Healthy or on probation: nothing accuses it now.
    pub fn is_clear(&self) -> bool {
        matches!(self.state, NodeState::Healthy | NodeState::Probation)
    }
}

/// A state change, with why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Change<Id> {
    /// Round of the change.
    pub round: u64,
    /// The entity.
    pub id: Id,
    /// Old state.
    pub from: NodeState,
    /// New state.
    pub to: NodeState,
    /// Why, in words.
    pub reason: String,
    /// The numbers behind it.
    pub evidence: Evidence,
}

/// The tracks of one group's entities, and the round count.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Lifecycle<Id, D> {
    round: u64,
    tracks: Vec<Track<D>>,
    id: PhantomData<Id>,
}

impl<Id: Ix, D: Clone> Lifecycle<Id, D> {
    /// Healthy entities with this data each, at round 0.
    pub fn new(data: impl IntoIterator<Item = D>) -> Self {
        Self::restored(0, data.into_iter().map(Track::new).collect())
    }

    /// Tracks taken over as they are, at `round`.
    pub fn restored(round: u64, tracks: Vec<Track<D>>) -> Self {
        Lifecycle {
            round,
            tracks,
            id: PhantomData,
        }
    }

    /// Starts the next round; returns its number.
    pub fn tick(&mut self) -> u64 {
        self.round += 1;
        self.round
    }

    /// Rounds processed.
    pub fn round(&self) -> u64 {
        self.round
    }

    /// Number of entities.
    pub fn len(&self) -> usize {
        self.tracks.len()
    }

    /// Every track, in index order.
    pub fn tracks(&self) -> &[Track<D>] {
        &self.tracks
    }

    /// Every track, mutably.
    pub fn tracks_mut(&mut self) -> &mut [Track<D>] {
        &mut self.tracks
    }

    /// Every entity's state.
    pub fn states(&self) -> Vec<NodeState> {
        self.tracks.iter().map(|t| t.state).collect()
    }

    /// Rounds since `id` entered its state.
    pub fn age(&self, id: Id) -> u64 {
        self.round - self[id].since
    }

    /// Moves `id` to `to` (nothing when it is there already): records the round, resets
    /// the counters, and returns the change.
    pub fn set(
        &mut self,
        id: Id,
        to: NodeState,
        reason: String,
        evidence: Evidence,
    ) -> Option<Change<Id>> {
        let round = self.round;
        let t = &mut self.tracks[id.ix()];
        let from = t.state;
        if from == to {
            return None;
        }
        t.state = to;
        t.since = round;
        t.counts = Counts::default();
        Some(Change {
            round,
            id,
            from,
            to,
            reason,
            evidence,
        })
    }

    /// Carries the tracks over to a new index table: `map[old]` is the old entity's new
    /// index (None: gone); new indices without an old entity get `fresh(new)`, and each
    /// carried one passes through `carry(new, track)`.
    pub fn remap(
        &mut self,
        map: &[Option<usize>],
        fresh: Vec<D>,
        carry: impl Fn(usize, Track<D>) -> Track<D>,
    ) {
        let mut tracks: Vec<Track<D>> = fresh.into_iter().map(Track::new).collect();
        for (old, new) in map.iter().enumerate() {
            if let (Some(new), Some(t)) = (new, self.tracks.get(old))
                && let Some(slot) = tracks.get_mut(*new)
            {
                *slot = carry(*new, t.clone());
            }
        }
        self.tracks = tracks;
    }
}

impl<Id: Ix, D> std::ops::Index<Id> for Lifecycle<Id, D> {
    type Output = Track<D>;
    fn index(&self, id: Id) -> &Track<D> {
        &self.tracks[id.ix()]
    }
}

impl<Id: Ix, D> std::ops::IndexMut<Id> for Lifecycle<Id, D> {
    fn index_mut(&mut self, id: Id) -> &mut Track<D> {
        &mut self.tracks[id.ix()]
    }
}

/// A pair key carried over to a new index table (None when an end is gone).
pub(crate) fn remap_pair(map: &[Option<usize>], (a, b): (usize, usize)) -> Option<(usize, usize)> {
    let idx = |i: usize| map.get(i).copied().flatten();
    Some((idx(a)?, idx(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_recorded_once_and_resets_the_counters() {
        let mut l: Lifecycle<NodeIx, ()> = Lifecycle::new([(), ()]);
        l.tick();
        l.tick();
        l[NodeIx(1)].counts.within(true);
        l[NodeIx(1)].counts.steady_round(true, false);
        let c = l
            .set(
                NodeIx(1),
                NodeState::Suspect,
                "slow".into(),
                Evidence::default(),
            )
            .expect("a change");
        assert_eq!(
            (c.round, c.id, c.from, c.to),
            (2, NodeIx(1), NodeState::Healthy, NodeState::Suspect)
        );
        assert_eq!(l[NodeIx(1)].counts, Counts::default());
        assert_eq!(l[NodeIx(1)].since, 2);
        assert!(
            l.set(
                NodeIx(1),
                NodeState::Suspect,
                "again".into(),
                Evidence::default()
            )
            .is_none()
        );
        l.tick();
        assert_eq!(l.age(NodeIx(1)), 1);
        assert_eq!(l.states(), vec![NodeState::Healthy, NodeState::Suspect]);
    }

    #[test]
    fn counters_count_runs() {
        let mut c = Counts::default();
        for explained in [false, true, false] {
            c.steady_round(true, explained);
        }
        assert_eq!((c.steady, c.quiet), (3, 2));
        c.steady_round(false, false);
        assert_eq!((c.steady, c.quiet), (0, 0));
        c.within(true);
        c.within(true);
        assert_eq!(c.clean, 2);
        c.within(false);
        assert_eq!(c.clean, 0);
    }

    /// Node 0 leaves, the others move down one, a new node arrives last; the pair (1, 2)
    /// becomes (0, 1), the pair (0, 1) is dropped with node 0.
    #[test]
    fn a_remap_carries_tracks_and_pairs_by_entity() {
        let mut l: Lifecycle<NodeIx, u8> = Lifecycle::new([10, 11, 12]);
        l.tick();
        l.set(
            NodeIx(2),
            NodeState::Suspect,
            String::new(),
            Evidence::default(),
        );
        let map = [None, Some(0), Some(1)];
        l.remap(&map, vec![0, 0, 0], |_, t| t);
        assert_eq!(
            l.tracks()
                .iter()
                .map(|t| (t.state, t.data))
                .collect::<Vec<_>>(),
            vec![
                (NodeState::Healthy, 11),
                (NodeState::Suspect, 12),
                (NodeState::Healthy, 0)
            ]
        );
        assert_eq!(remap_pair(&map, (1, 2)), Some((0, 1)));
        assert_eq!(remap_pair(&map, (0, 1)), None);
    }
}
