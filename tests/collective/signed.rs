//! Signed all-gathers (wire version 4): every block is checked against its author's key,
//! whoever relayed it. A rank with the test-only relay fault rewrites one author's blocks
//! as it forwards them, after the author signed them.

use std::sync::Arc;

use hcclwatch::collective::authorship::{Forgery, RelayFault};
use hcclwatch::collective::{Communicator, DataType};

use super::world::{config, on_all, world_with};

/// A ring of `n` where rank `forger` rewrites (XOR 0xff) the blocks of rank `victim` it
/// relays.
fn ring_with_forger(n: usize, forger: usize, victim: usize) -> Vec<Communicator> {
    let cfgs = (0..n)
        .map(|r| {
            let mut c = config(11, b"test-key", None);
            c.measure_costs = false;
            if r == forger {
                c.relay_fault = Some(RelayFault(Arc::new(move |_, author, block| {
                    if author == victim {
                        block.iter_mut().for_each(|b| *b ^= 0xff);
                    }
                })));
            }
            c
        })
        .collect();
    world_with(n, cfgs)
        .into_iter()
        .map(|c| c.expect("init"))
        .collect()
}

#[test]
fn every_member_reads_every_honest_block_and_only_downstream_members_see_a_forgery() {
    // Ring 0 → 1 → 2 → 3 → 4 → 0; rank 2 forges rank 1's blocks, which reach 3, 4 and 0
    // through it. Rank 1's own copy, and 2's, are its own business.
    let (n, forger, victim) = (5, 2, 1);
    let mut comms = ring_with_forger(n, forger, victim);
    assert!(comms.iter().all(Communicator::signs_gathers));
    let out = on_all(&mut comms, |r, c| {
        let mine = [r as u8 + 1; 24];
        let mut all = vec![0u8; 24 * n];
        let forged = c
            .all_gather_signed("test", &mine, &mut all, DataType::Uint8)
            .unwrap();
        (all, forged, c.take_forgeries())
    });
    for (r, (all, forged, taken)) in out.into_iter().enumerate() {
        let downstream = [3, 4, 0].contains(&r);
        for a in 0..n {
            let block = &all[24 * a..24 * (a + 1)];
            if a == victim && downstream {
                assert_eq!(block, [0u8; 24], "rank {r}: a forged block is zeroed");
            } else if a != victim || r == victim {
                assert_eq!(block, [a as u8 + 1; 24], "rank {r} reads rank {a}");
            }
        }
        let want = if downstream {
            vec![Forgery {
                author: victim,
                relay: forger,
            }]
        } else {
            Vec::new()
        };
        if r != forger {
            assert_eq!(forged, want, "rank {r}");
            assert_eq!(taken, want, "rank {r}: kept for counting");
        }
    }
}

#[test]
fn a_forged_block_all_members_must_agree_on_breaks_the_communicator_and_names_the_relay() {
    let (n, forger, victim) = (4, 2, 1);
    let mut comms = ring_with_forger(n, forger, victim);
    let out = on_all(&mut comms, |_, c| {
        let mut all = vec![0u8; 8 * n];
        let r = c.all_gather_agreed("plan", &[7u8; 8], &mut all, DataType::Uint8);
        // Whatever a member saw, the next operation fails on every member: the ones that
        // saw the forgery broke the communicator.
        let next = c.barrier();
        (r, next, c.take_forgeries())
    });
    for (r, (res, next, taken)) in out.into_iter().enumerate() {
        if [3, 0].contains(&r) {
            let e = res.expect_err("a downstream member goes on with a forged plan");
            assert_eq!(e.peer, Some(forger), "rank {r}: {e}");
            assert!(
                e.message.contains("plan of rank 1") && e.message.contains("rank 2"),
                "rank {r}: {e}"
            );
            assert_eq!(
                taken,
                vec![Forgery {
                    author: victim,
                    relay: forger
                }]
            );
        }
        assert!(
            next.is_err(),
            "rank {r} went on after a forgery broke the round"
        );
    }
}

#[test]
fn an_empty_block_gathers_nothing_and_does_not_panic() {
    let mut comms = ring_with_forger(3, 9, 9);
    let out = on_all(&mut comms, |_, c| {
        c.all_gather_signed("empty", &[], &mut [], DataType::Uint8)
    });
    assert!(out.into_iter().all(|r| r.unwrap().is_empty()));
}
