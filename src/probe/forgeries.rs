//! Blocks of a round whose author's signature failed: counted by relay and named in the
//! log once per author and relay.
//!
//! The collective checks every signed block ([`crate::collective::authorship`]); the
//! prober knows the members' names, so the counting and the log live here. The count is
//! `hcclwatch_probe_forged_rows_total{relay}`: a member that holds the probe key and
//! rewrites what it relays shows as that relay on every member downstream of it.

use std::collections::BTreeSet;

use std::sync::Arc;

use crate::collective::Communicator;
use crate::collective::authorship::{Forgery, RelayFault};
use crate::snapshot::probe::ProbeSnapshot;

/// What has been said about forged blocks, so that a forger is logged once per victim and
/// not every round.
#[derive(Debug, Default)]
pub struct ForgedRows {
    logged: BTreeSet<(String, String)>,
}

impl ForgedRows {
    /// Takes the forgeries `comm`'s signed all-gathers found since the last call and
    /// counts them ([`Self::count`]). The prober calls it after every round, after every
    /// formation (also one a forgery broke) and before it drops a communicator, so a
    /// forgery that broke a round is counted too.
    pub fn take_from(
        &mut self,
        comm: Option<&mut Communicator>,
        part: &mut ProbeSnapshot,
        group: &[usize],
    ) {
        if let Some(c) = comm {
            self.count(part, group, &c.take_forgeries());
        }
    }

    /// Counts `forged` (ranks of the group whose candidate indices are `group`) into
    /// `part` by the relay's name, and logs each (author, relay) the first time.
    pub fn count(&mut self, part: &mut ProbeSnapshot, group: &[usize], forged: &[Forgery]) {
        for f in forged {
            let name = |rank: usize| {
                group
                    .get(rank)
                    .and_then(|&i| part.members.get(i))
                    .map_or_else(|| format!("rank {rank}"), |m| m.name.clone())
            };
            let (author, relay) = (name(f.author), name(f.relay));
            *part.forged_rows.entry(relay.clone()).or_default() += 1;
            if self.logged.insert((author.clone(), relay.clone())) {
                tracing::warn!(
                    author = %author,
                    relay = %relay,
                    "a probe block failed its author's signature and was left out: a member that holds the probe key rewrote it on the way, at {relay} or after it (docs/security.md)"
                );
            }
        }
    }
}

/// Fault injection (tests only, `probe.inject_forge_relayed`): the relay fault that
/// rewrites the probe rows of rank `victim` as this member relays them
/// ([`super::round::forge_row`]).
pub fn forging_relay(victim: usize) -> RelayFault {
    RelayFault(Arc::new(
        move |context: &str, author: usize, block: &mut [u8]| {
            if context == "probe row" && author == victim {
                super::round::forge_row(block);
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::probe::MemberView;

    #[test]
    fn forged_blocks_count_by_the_relays_name_and_log_once() {
        let mut part = ProbeSnapshot::default();
        for name in ["a", "b", "c", "d"] {
            part.members.push(MemberView::new(name));
        }
        // The group is candidates 3, 0, 1 (ranks 0, 1, 2): rank 1 relays rank 0's rows.
        let group = [3, 0, 1];
        let forged = [Forgery {
            author: 0,
            relay: 1,
        }];
        let mut rows = ForgedRows::default();
        rows.count(&mut part, &group, &forged);
        rows.count(&mut part, &group, &forged);
        assert_eq!(part.forged_rows.get("a"), Some(&2));
        assert_eq!(part.forged_rows.len(), 1);
        assert_eq!(rows.logged.len(), 1);
        assert!(rows.logged.contains(&("d".to_string(), "a".to_string())));
        // A rank outside the group is named by its rank, never dropped.
        rows.count(
            &mut part,
            &group,
            &[Forgery {
                author: 7,
                relay: 9,
            }],
        );
        assert_eq!(part.forged_rows.get("rank 9"), Some(&1));
    }
}
