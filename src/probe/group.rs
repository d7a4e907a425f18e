//! What members exchange when a group forms, before its first round: their names (for a
//! DNS-discovered group) and the health engine's learned state, so that a member that just
//! (re)joined reaches the same verdicts as the others.

use crate::collective::{CollResult, Communicator, DataType};
use crate::health::HealthEngine;

/// Makes every member's engine the one that has processed the most rounds (ties: the
/// lowest rank's): its snapshot is broadcast, the others restore it. Returns the rank it
/// came from if this member took it over. A snapshot this member cannot take (another
/// number of candidates) is logged and its own engine kept.
pub fn adopt_engine(c: &mut Communicator, engine: &mut HealthEngine) -> CollResult<Option<usize>> {
    let n = c.size();
    let mut rounds = vec![0u8; 8 * n];
    c.all_gather(
        &engine.rounds().to_le_bytes(),
        &mut rounds,
        1,
        DataType::Uint64,
    )?;
    let rounds: Vec<u64> = rounds
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        .collect();
    let best = rounds.iter().copied().max().unwrap_or(0);
    let src = rounds.iter().position(|r| *r == best).unwrap_or(0);
    if rounds.iter().all(|r| *r == best) {
        // Everyone is as far as everyone else (a group formed together): nothing to send.
        return Ok(None);
    }
    let mut snapshot = if c.rank() == src {
        engine.snapshot()
    } else {
        Vec::new()
    };
    let mut len = (snapshot.len() as u64).to_le_bytes();
    c.broadcast(&mut len, 1, DataType::Uint64, src)?;
    let len = u64::from_le_bytes(len) as usize;
    snapshot.resize(len, 0);
    c.broadcast(&mut snapshot, len, DataType::Uint8, src)?;
    if c.rank() == src {
        return Ok(None);
    }
    match engine.restore(&snapshot) {
        Ok(()) => Ok(Some(src)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot take over the group's engine state; keeping this node's own");
            Ok(None)
        }
    }
}

/// Longest node name a member announces (bytes of UTF-8).
const NAME_MAX: usize = 128;

/// All-gathers every member's announced name. A name that is empty, not UTF-8 or not a
/// printable label is ignored (None: the member stays known by its address).
pub fn exchange_names(c: &mut Communicator, own: &str) -> CollResult<Vec<Option<String>>> {
    let mut mine = [0u8; NAME_MAX];
    let b = own.as_bytes();
    let len = if b.len() <= NAME_MAX { b.len() } else { 0 };
    mine[..len].copy_from_slice(&b[..len]);
    let mut all = vec![0u8; NAME_MAX * c.size()];
    c.all_gather(&mine, &mut all, NAME_MAX, DataType::Uint8)?;
    Ok(all
        .chunks_exact(NAME_MAX)
        .map(|raw| {
            let end = raw.iter().position(|b| *b == 0).unwrap_or(NAME_MAX);
            std::str::from_utf8(&raw[..end])
                .ok()
                .filter(|n| !n.is_empty() && n.chars().all(|ch| ch.is_ascii_graphic()))
                .map(str::to_string)
        })
        .collect())
}
