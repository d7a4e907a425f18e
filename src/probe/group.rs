//! What members exchange when a group forms, before its first round: their names (for a
//! DNS-discovered group), their places in the network, and the health engine's learned
//! state, so that a member that just (re)joined reaches the same verdicts as the others.
//! The state taken over is the one a majority holds, checked by digest and bounded in size,
//! never one member's claim.
//!
//! **Places** ([`exchange_places`]): each member all-gathers its own place (ToR, spine,
//! super pod and the source that gave them), as its topology source published it. That is
//! simpler than putting the topology in the round plan and as correct: every member ends
//! the exchange holding the same vector, so every engine judges with the same topology;
//! each node's place is said by the one node whose sources know it (its own labels, its own
//! line of the rank table), so members with different files or API views never disagree
//! about a third node; and it costs one fixed-size all-gather per formation, not bytes in
//! every round. A member whose place changes makes the group re-form (`prober.rs`), so the
//! exchange is repeated whenever the topology changes.

use crate::collective::{CollResult, Communicator, DataType};
use crate::health::HealthEngine;
use crate::snapshot::topology::{NodePlace, Place, TopologySource};

/// How the engine-state hand-over of a forming group ended for this member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handover {
    /// Every member already held the majority's state, or this one did.
    Unchanged,
    /// No strict majority holds one state: every member keeps its own.
    NoMajority,
    /// This member took over the majority's state, sent by rank `from`.
    Adopted {
        /// The sender's rank in the group.
        from: usize,
    },
    /// The sender broke the hand-over: it announced more bytes than any state can hold,
    /// or sent bytes that are not the state the majority announced. Every member sees the
    /// same failure from the same sender, so every member can leave that one out and form
    /// without it; the communicator may be unusable afterwards.
    Refused {
        /// The sender's rank in the group.
        from: usize,
        /// What it did, for the log and the state API.
        why: String,
    },
}

/// Test-only faults of the hand-over (`probe.inject_lies`,
/// `probe.inject_oversize_handover`).
#[derive(Debug, Clone, Copy, Default)]
pub struct HandoverFaults {
    /// Announce and send a forged state (everyone else recommended for quarantine).
    pub lie: bool,
    /// When this member is the sender, send more bytes than any state can hold.
    pub oversize: bool,
}

/// Makes every member's engine the state a strict majority of the members hold: each member
/// all-gathers its state's digest (BLAKE3) and round count; when a majority holds one digest
/// and some member holds another, the lowest rank of the majority sends its state and the
/// others take it only if its digest is the majority's. No single member's claim (of rounds,
/// or of a state) is ever adopted. Without a majority every member keeps its own state and
/// says so. A sender that breaks the hand-over is named ([`Handover::Refused`]), so that the
/// members can form without it instead of failing on it again at every formation.
pub fn adopt_engine(
    c: &mut Communicator,
    engine: &mut HealthEngine,
    max_len: usize,
    faults: HandoverFaults,
) -> CollResult<Handover> {
    let n = c.size();
    // A liar (fault injection, tests only) announces and would send a forged state: its
    // own, with every other node recommended for quarantine and a huge round count.
    let mine = if faults.lie {
        forged(&engine.snapshot())
    } else {
        engine.snapshot()
    };
    let digest = *blake3::hash(&mine).as_bytes();
    let mut all = vec![0u8; 32 * n];
    c.all_gather_agreed("engine state digest", &digest, &mut all, DataType::Uint8)?;
    let digests: Vec<&[u8]> = all.chunks_exact(32).collect();
    let majority = digests
        .iter()
        .find(|d| digests.iter().filter(|e| e == d).count() * 2 > n)
        .map(|d| d.to_vec());
    let Some(majority) = majority else {
        if digests.iter().any(|d| *d != digests[0]) {
            tracing::warn!(
                members = n,
                "members hold different health-engine states and no majority agrees; each keeps its own until the states converge"
            );
        }
        return Ok(Handover::NoMajority);
    };
    if digests.iter().all(|d| *d == majority.as_slice()) {
        // Everyone already holds the same state (a group formed together): nothing to send.
        return Ok(Handover::Unchanged);
    }
    let src = digests
        .iter()
        .position(|d| *d == majority.as_slice())
        .unwrap_or(0);
    let sent = match (c.rank() == src, faults.oversize) {
        (true, true) => vec![b' '; max_len + 1],
        (true, false) => mine,
        (false, _) => Vec::new(),
    };
    let got = match c.broadcast_bytes(&sent, src, max_len) {
        Ok(got) => got,
        // Every rank checks the announced length before anything is sent, so every rank
        // sees this one, from the same sender.
        Err(e)
            if e.peer == Some(src)
                && e.code == crate::collective::HcclCode::Para
                && e.step == "broadcast_bytes" =>
        {
            return Ok(Handover::Refused {
                from: src,
                why: format!("its engine-state hand-over was refused: {e}"),
            });
        }
        Err(e) => return Err(e),
    };
    if digests[c.rank()] == majority.as_slice() {
        return Ok(Handover::Unchanged);
    }
    if blake3::hash(&got).as_bytes() != majority.as_slice() {
        return Ok(Handover::Refused {
            from: src,
            why: "it sent an engine state that is not the one the majority announced".into(),
        });
    }
    match engine.restore(&got) {
        Ok(()) => Ok(Handover::Adopted { from: src }),
        Err(e) => {
            tracing::warn!(error = %e, "cannot take over the group's engine state; keeping this node's own");
            Ok(Handover::Unchanged)
        }
    }
}

/// A liar's forged engine state (fault injection): every node recommended for quarantine,
/// a round count far ahead of everyone's.
fn forged(snapshot: &[u8]) -> Vec<u8> {
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(snapshot) else {
        return snapshot.to_vec();
    };
    if let Some(nodes) = v["nodes"].as_array_mut() {
        for n in nodes {
            n["state"] = serde_json::json!("QuarantineRecommended");
        }
    }
    v["round"] = serde_json::json!(1u64 << 40);
    serde_json::to_vec(&v).unwrap_or_else(|_| snapshot.to_vec())
}

/// The members (ranks) to leave out because their release speaks no wire version as high
/// as `min` (`collective.min_wire_version`), with the reason for the log and the state
/// API; None when the group speaks `min` or more. Every member reads every other's range
/// in its own handshakes, so every member leaves out the same ones and the rest form
/// without them.
pub fn below_floor(c: &Communicator, min: u8) -> Option<(Vec<usize>, String)> {
    if c.wire_version() >= min {
        return None;
    }
    let why = format!(
        "its release speaks no wire version as high as collective.min_wire_version = {min} (the group would speak {}); upgrade it (docs/upgrades.md)",
        c.wire_version()
    );
    Some((c.peers_below(min), why))
}

/// Longest node name a member announces (bytes of UTF-8).
const NAME_MAX: usize = 128;

/// All-gathers every member's announced name. A name that is empty, not UTF-8 or not a
/// printable label is ignored (None: the member stays known by its address), and so is,
/// in certificate mode, a name the member's certificate is not valid for.
pub fn exchange_names(c: &mut Communicator, own: &str) -> CollResult<Vec<Option<String>>> {
    let mut mine = [0u8; NAME_MAX];
    let b = own.as_bytes();
    let len = if b.len() <= NAME_MAX { b.len() } else { 0 };
    mine[..len].copy_from_slice(&b[..len]);
    let mut all = vec![0u8; NAME_MAX * c.size()];
    c.all_gather_agreed("member name", &mine, &mut all, DataType::Uint8)?;
    Ok(all
        .chunks_exact(NAME_MAX)
        .enumerate()
        .map(|(rank, raw)| {
            let end = raw.iter().position(|b| *b == 0).unwrap_or(NAME_MAX);
            let name = std::str::from_utf8(&raw[..end])
                .ok()
                .filter(|n| !n.is_empty() && n.chars().all(|ch| ch.is_ascii_graphic()))?;
            if c.certifies(rank, name) == Some(false) {
                tracing::warn!(rank, name, "a member announced a name its certificate is not valid for; it stays known by its address");
                return None;
            }
            Some(name.to_string())
        })
        .collect())
}

/// Bytes of one place on the wire: the source's code, then the ToR, spine and super pod,
/// each zero-padded to [`NAME_MAX`] (the topology sources refuse longer names).
const PLACE_BYTES: usize = 1 + 3 * NAME_MAX;

/// One field of a place from the wire: `None` when empty, too long, not UTF-8 or not a
/// printable label (a member's bad field is unknown, never guessed).
fn field(raw: &[u8]) -> Option<String> {
    let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
    std::str::from_utf8(&raw[..end])
        .ok()
        .filter(|n| !n.is_empty() && n.chars().all(|ch| ch.is_ascii_graphic()))
        .map(str::to_string)
}

/// All-gathers every member's own place (see the module doc). A member that knows none
/// (or sends nothing usable) is `None`.
pub fn exchange_places(
    c: &mut Communicator,
    own: Option<&NodePlace>,
) -> CollResult<Vec<Option<NodePlace>>> {
    let mut mine = [0u8; PLACE_BYTES];
    if let Some(p) = own {
        mine[0] = p.source.code();
        let fields = [&p.place.tor, &p.place.spine, &p.place.super_pod];
        for (k, f) in fields.into_iter().enumerate() {
            let b = f.as_deref().unwrap_or("").as_bytes();
            if b.len() <= NAME_MAX {
                mine[1 + k * NAME_MAX..1 + k * NAME_MAX + b.len()].copy_from_slice(b);
            }
        }
    }
    let mut all = vec![0u8; PLACE_BYTES * c.size()];
    c.all_gather_agreed("member place", &mine, &mut all, DataType::Uint8)?;
    Ok(all.chunks_exact(PLACE_BYTES).map(decode_place).collect())
}

/// One member's place from its all-gathered bytes.
fn decode_place(raw: &[u8]) -> Option<NodePlace> {
    let f = |k: usize| field(&raw[1 + k * NAME_MAX..1 + (k + 1) * NAME_MAX]);
    let place = Place {
        tor: f(0),
        spine: f(1),
        super_pod: f(2),
    };
    let source = TopologySource::from_code(raw[0]);
    (!place.is_empty() && source != TopologySource::None).then_some(NodePlace { place, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_decodes_as_encoded_and_garbage_claims_nothing() {
        let mut raw = [0u8; PLACE_BYTES];
        raw[0] = TopologySource::HyperNode.code();
        raw[1..6].copy_from_slice(b"tor-a");
        raw[1 + 2 * NAME_MAX..1 + 2 * NAME_MAX + 3].copy_from_slice(b"sp0");
        let p = decode_place(&raw).unwrap();
        assert_eq!(p.source, TopologySource::HyperNode);
        assert_eq!(p.place.tor.as_deref(), Some("tor-a"));
        assert_eq!(p.place.spine, None);
        assert_eq!(p.place.super_pod.as_deref(), Some("sp0"));
        // A field that is not a printable label is unknown; a place with no source is none.
        raw[1 + NAME_MAX] = b' ';
        raw[2 + NAME_MAX] = b'x';
        assert_eq!(decode_place(&raw).unwrap().place.spine, None);
        raw[0] = 0;
        assert_eq!(decode_place(&raw), None);
        assert_eq!(decode_place(&[0u8; PLACE_BYTES]), None);
    }
}
