//! One probe round on a formed group, as every member runs it in lock step.
//!
//! A round is: a barrier (each node's wait gives the arrival lag: the straggler waits
//! least), the plan rank 0 broadcasts, a small all-reduce (latency), a latency-sized
//! ping-pong with the permutation peer (round trip), a permutation exchange (node i
//! sends to i + s and receives from i − s, the stride rotating every round, so every node
//! sends one flow and receives one), the plan's confirmation and link re-measurement pairs,
//! and periodically a ring all-reduce at a bandwidth size (a ring runs at its slowest
//! link). Every member's timings are then all-gathered, so each engine gets identical
//! input.

use std::time::{Instant, SystemTime};

use super::ProbeSettings;
use super::plan::Plan;
use super::{row, trace};
use crate::collective::algo::select::allreduce_cost;
use crate::collective::{CollResult, Communicator, DataType, ReduceOp};
use crate::health::Probe;
use crate::health::hardware::Signs;
use crate::snapshot::probe::LinkView;

/// One member's measurements of a round, as all-gathered.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Seconds it waited in the barrier.
    pub wait: f64,
    /// Its small all-reduce, seconds.
    pub latency: f64,
    /// Its permutation exchange (the link it received on), seconds.
    pub link: f64,
    /// Its ring all-reduce, seconds (NaN when no ring ran).
    pub ring: f64,
    /// Its hard-fault code (0: none).
    pub hard: u8,
    /// It is over its probe budget (the group's rounds are reduced only when a strict
    /// majority is: see [`majority_over_budget`]).
    pub over_budget: bool,
    /// Its ping-pong round trip, seconds.
    pub rtt: f64,
    /// Its own uplink counters showed congestion since its last round.
    pub congested: bool,
    /// The hardware signs its own uplink showed.
    pub hardware: Signs,
    /// Its end of each plan pair it took part in, seconds (NaN elsewhere).
    pub confirm: Vec<f64>,
}

/// The ring all-reduce of a round: algorithm, bytes, and the α-β model's seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct RingRun {
    /// Algorithm the engine chose.
    pub algo: String,
    /// Buffer size.
    pub bytes: usize,
    /// Predicted seconds from the costs measured when the group formed.
    pub predicted: f64,
}

/// What a round produced: every member's measurements (by rank), the stride, the ring
/// run, and the plan the round ran.
pub struct RoundResult {
    /// Measurements by rank.
    pub measured: Vec<Measured>,
    /// Permutation stride.
    pub stride: usize,
    /// The ring all-reduce, when one ran.
    pub ring: Option<RingRun>,
    /// The agreed plan.
    pub plan: Plan,
    /// The wire version the group spoke (the highest every member supports).
    pub wire_version: u8,
    /// Whether the group's members proved who they are with certificates.
    pub certificate_mode: bool,
}

/// What this member contributes besides its timings.
pub struct Contribution {
    /// Its hard-fault code.
    pub hard: u8,
    /// It is over its probe budget.
    pub over_budget: bool,
    /// Its own uplink counters showed congestion since its last round.
    pub congested: bool,
    /// The hardware signs its own uplink showed.
    pub hardware: Signs,
    /// Fault injection (tests only): report 10 s for every timing.
    pub lie: bool,
}

/// A confirmation exchange's duration: the slower of its two ends (NaN if neither timed it).
pub fn pair_seconds(m: &[Measured], k: usize, x: usize, p: usize) -> f64 {
    let at = |i: usize| {
        m.get(i)
            .and_then(|r| r.confirm.get(k))
            .copied()
            .unwrap_or(f64::NAN)
    };
    match (at(x), at(p)) {
        (a, b) if a.is_nan() => b,
        (a, b) if b.is_nan() => a,
        (a, b) => a.max(b),
    }
}

/// The probes of a permutation round in candidate indices: member k received on the link
/// from k − stride. Each rank sends first (the probe fits in the socket buffers, so the
/// send completes without the peer) and then waits for its left neighbour, so its exchange
/// time measures the link it received on. (A shaped egress delays the receiver, not the
/// sender.)
pub fn permutation_probes(group: &[usize], m: &[Measured], stride: usize) -> Vec<Probe> {
    let n = group.len();
    (0..n)
        .map(|k| Probe {
            src: group[(k + n - stride) % n],
            dst: group[k],
            seconds: m[k].link,
        })
        .collect()
}

/// The permutation round's links in candidate indices. A latency-sized exchange says
/// nothing about a link's bandwidth, so a reduced round has none instead of a misleading
/// dip.
pub(super) fn link_views(s: &ProbeSettings, r: &RoundResult, g: &[usize]) -> Vec<LinkView> {
    if r.plan.limited {
        return Vec::new();
    }
    permutation_probes(g, &r.measured, r.stride)
        .into_iter()
        .map(|p| LinkView {
            src: p.src,
            dst: p.dst,
            bytes_per_second: s.link_bytes.max(1) as f64 / p.seconds.max(1e-9),
        })
        .collect()
}

/// Whether the next round is reduced (latency-sized exchanges, no ring): only when a strict
/// majority of the round's members said they are over budget. One member's flag, honest or
/// not, never holds the whole group in reduced rounds; it keeps counting its own usage
/// (`hcclwatch_probe_budget_ratio`) and its alert still fires.
pub fn majority_over_budget(m: &[Measured]) -> bool {
    m.iter().filter(|x| x.over_budget).count() * 2 > m.len()
}

/// The group's latency of a round, from the members' own small all-reduce timings: their
/// median, taken over the reports that are finite, not negative and at most `bound` seconds
/// (the exec timeout: no all-reduce that completed took longer). Returns it (None when no
/// report is usable) and how many reports were dropped. Unlike the slowest rank's time, no
/// minority of members can move it outside the range of the others' reports.
pub fn group_latency(m: &[Measured], bound: f64) -> (Option<f64>, usize) {
    let mut v: Vec<f64> = m
        .iter()
        .map(|x| x.latency)
        .filter(|l| l.is_finite() && (0.0..=bound).contains(l))
        .collect();
    let dropped = m.len() - v.len();
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len();
    let median = match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    };
    (median, dropped)
}

fn f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn from_f64s(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_ne_bytes(c.try_into().unwrap_or_default()))
        .collect()
}

/// A round in progress on one member. Measurement traffic (the all-reduces, pings,
/// exchanges and re-pairings) runs as bulk payload, tagged when
/// `collective.authenticate_payloads` is on; the barrier, the plan and the gathered rows are
/// control frames, always tagged.
struct Exchange<'a> {
    cx: &'a opentelemetry::Context,
    comm: &'a mut Communicator,
    s: &'a ProbeSettings,
    bytes_sent: &'a mut u64,
}

/// Times `f`, returning its result and seconds, with the wall-clock start for the span.
fn timed<T>(f: impl FnOnce() -> CollResult<T>) -> CollResult<(T, f64, SystemTime)> {
    let (t, w) = (Instant::now(), SystemTime::now());
    let r = f()?;
    Ok((r, t.elapsed().as_secs_f64(), w))
}

impl Exchange<'_> {
    fn barrier(&mut self) -> CollResult<f64> {
        let n = self.comm.size();
        let ((), wait, w) = timed(|| self.comm.barrier())?;
        trace::op(
            self.cx,
            trace::OpSpan {
                name: "probe.barrier",
                op: "barrier",
                algo: "",
                bytes: 0,
                peers: n,
                bus_factor: 1.0,
            },
            w,
            wait,
        );
        Ok(wait)
    }

    /// The plan a majority of members proposes, all-gathered after the barrier so it does
    /// not absorb the arrival lag. No single member (rank 0 included) chooses it: see
    /// [`Plan::agree`].
    ///
    /// A forged proposal (wire version 4) breaks the round: only the members downstream of
    /// the forger see it, and leaving it out there alone could split the group's plan.
    fn agree(&mut self, proposal: &Plan) -> CollResult<Plan> {
        let mine = proposal.encode();
        let mut all = vec![0u8; mine.len() * self.comm.size()];
        self.comm
            .all_gather_agreed("probe plan", &mine, &mut all, DataType::Uint64)?;
        let plans: Vec<Plan> = all
            .chunks_exact(mine.len())
            .map(|b| Plan::decode(b, self.comm.size()))
            .collect();
        Ok(Plan::agree(&plans))
    }

    fn latency(&mut self) -> CollResult<f64> {
        let n = self.comm.size();
        let count = (self.s.small_bytes / 4).max(1);
        let mut small = vec![0u8; count * 4];
        let (algo, latency, w) = timed(|| {
            self.comm
                .bulk()
                .all_reduce_in_place(&mut small, count, DataType::Fp32, ReduceOp::Sum)
        })?;
        let factor = 2.0 * (n as f64 - 1.0) / n as f64;
        let (cx, bytes) = (self.cx, small.len());
        trace::op(
            cx,
            trace::OpSpan {
                name: "probe.all_reduce",
                op: "all_reduce",
                algo: algo.name(),
                bytes,
                peers: n,
                bus_factor: factor,
            },
            w,
            latency,
        );
        Ok(latency)
    }

    /// A latency-sized ping-pong with the permutation peer: ping to i + s (while receiving
    /// i − s's ping), then answer i − s (while receiving i + s's answer). The time to the
    /// answer is this node's round trip to i + s.
    fn ping_pong(&mut self, stride: usize) -> CollResult<f64> {
        let (n, r) = (self.comm.size(), self.comm.rank());
        let ping = vec![0x5au8; self.s.small_bytes.max(1)];
        let mut pong = vec![0u8; ping.len()];
        let (right, left) = ((r + stride) % n, (r + n - stride) % n);
        let len = ping.len();
        let ((), rtt, w) = timed(|| {
            self.comm
                .bulk()
                .send_recv(&ping, right, &mut pong, left, len, DataType::Uint8)?;
            self.comm
                .bulk()
                .send_recv(&ping, left, &mut pong, right, len, DataType::Uint8)
        })?;
        trace::op(
            self.cx,
            trace::OpSpan {
                name: "probe.ping_pong",
                op: "send_recv",
                algo: "direct",
                bytes: 2 * len,
                peers: 2,
                bus_factor: 1.0,
            },
            w,
            rtt,
        );
        *self.bytes_sent += 2 * len as u64;
        Ok(rtt)
    }

    fn permutation(&mut self, stride: usize, send: &[u8], recv: &mut [u8]) -> CollResult<f64> {
        let (n, r) = (self.comm.size(), self.comm.rank());
        let len = send.len();
        let ((), link, w) = timed(|| {
            self.comm.bulk().send_recv(
                send,
                (r + stride) % n,
                recv,
                (r + n - stride) % n,
                len,
                DataType::Uint8,
            )
        })?;
        trace::op(
            self.cx,
            trace::OpSpan {
                name: "probe.exchange",
                op: "send_recv",
                algo: "permutation",
                bytes: len,
                peers: 2,
                bus_factor: 1.0,
            },
            w,
            link,
        );
        *self.bytes_sent += len as u64;
        Ok(link)
    }

    /// This member's end of every plan pair it is in (NaN for the others).
    fn pairs(&mut self, plan: &Plan, send: &[u8], recv: &mut [u8]) -> CollResult<Vec<f64>> {
        let r = self.comm.rank();
        let mut confirm = vec![f64::NAN; plan.pairs.len()];
        for (k, &(x, p)) in plan.pairs.iter().enumerate() {
            if r != x && r != p {
                continue;
            }
            let other = if r == x { p } else { x };
            // Meet first (one byte each way, untimed): the pairs run one after another,
            // and time spent waiting for a partner still busy with its previous pair is
            // not the link's.
            let mut one = [0u8; 1];
            self.comm
                .bulk()
                .send_recv(&[1u8], other, &mut one, other, 1, DataType::Uint8)?;
            let len = send.len();
            let ((), secs, w) = timed(|| {
                self.comm
                    .bulk()
                    .send_recv(send, other, recv, other, len, DataType::Uint8)
            })?;
            trace::op(
                self.cx,
                trace::OpSpan {
                    name: "probe.confirm",
                    op: "send_recv",
                    algo: "confirmation",
                    bytes: len,
                    peers: 2,
                    bus_factor: 1.0,
                },
                w,
                secs,
            );
            *self.bytes_sent += len as u64;
            // Both ends time the exchange: a send returns once the kernel has the bytes,
            // so a node whose egress is shaped looks fast from its own side and slow only
            // from its peer's. The pair's value is the slower end (see `pair_seconds`).
            confirm[k] = secs;
        }
        Ok(confirm)
    }

    fn ring(&mut self) -> CollResult<(f64, RingRun)> {
        let n = self.comm.size();
        let count = (self.s.ring_bytes / 4).max(1);
        let mut buf = vec![0u8; count * 4];
        let (algo, secs, w) = timed(|| {
            self.comm
                .bulk()
                .all_reduce_in_place(&mut buf, count, DataType::Fp32, ReduceOp::Sum)
        })?;
        let factor = 2.0 * (n as f64 - 1.0) / n as f64;
        let bytes = buf.len();
        trace::op(
            self.cx,
            trace::OpSpan {
                name: "probe.all_reduce",
                op: "all_reduce",
                algo: algo.name(),
                bytes,
                peers: n,
                bus_factor: factor,
            },
            w,
            secs,
        );
        *self.bytes_sent += (2 * (n - 1) * bytes / n) as u64;
        let predicted = allreduce_cost(algo, n, bytes, self.comm.costs());
        let run = RingRun {
            algo: algo.name().to_string(),
            bytes,
            predicted,
        };
        Ok((secs, run))
    }

    /// All-gathers every member's row, in the layout of the wire version the group agreed
    /// on, and splits it back into measurements. A row whose signature fails (wire version
    /// 4) is a member whose measurements this round are unknown.
    fn gather(&mut self, mine: Vec<f64>) -> CollResult<Vec<Measured>> {
        let n = self.comm.size();
        let version = self.comm.wire_version();
        let slots = mine.len().saturating_sub(ROW_FIXED);
        let mine = row::encode(version, &mine);
        let width = mine.len();
        let mut all = vec![0u8; width * 8 * n];
        let algo = if self.comm.signs_gathers() {
            "ring"
        } else {
            self.comm.gather_algo("allgather", all.len()).name()
        };
        let (forged, secs, w) = timed(|| {
            self.comm
                .all_gather_signed("probe row", &f64s(&mine), &mut all, DataType::Fp64)
        })?;
        let factor = (n as f64 - 1.0) / n as f64;
        trace::op(
            self.cx,
            trace::OpSpan {
                name: "probe.all_gather",
                op: "all_gather",
                algo,
                bytes: all.len(),
                peers: n,
                bus_factor: factor,
            },
            w,
            secs,
        );
        let mut rows = read_rows(version, &all, width, slots);
        // Counted and logged by the prober, which knows the names.
        for f in &forged {
            if let Some(r) = rows.get_mut(f.author) {
                *r = Measured::unknown(slots);
            }
        }
        Ok(rows)
    }
}

/// Fields of a gathered row before its confirmation timings: wait, latency, link, ring,
/// hard-fault code, over budget, round trip, uplink flags.
///
/// The uplink flags field is a whole number: bit 0 the uplink was congested, the bits
/// above it the hardware signs ([`Signs::bits`] shifted left by one). A row without signs
/// writes 0 or 1, as builds before the signs did, and such builds read only a 1 as
/// congested.
pub const ROW_FIXED: usize = 8;

/// Splits all-gathered rows of `width` f64s each, in the layout of wire version 2 (native
/// byte order, as every member of a group runs on the same architecture), back into
/// measurements: one per whole row, a trailing partial row ignored. Pure and total: a row shorter than
/// [`ROW_FIXED`] reads its missing fields as NaN, a hard-fault code is clamped to `0..=255`
/// (NaN: 0), and every row has `width - ROW_FIXED` confirmation slots.
pub fn split_rows(all: &[u8], width: usize) -> Vec<Measured> {
    from_f64s(all)
        .chunks_exact(width.max(1))
        .map(measured)
        .collect()
}

/// One member's measurements from its row in the layout of wire version 2.
fn measured(row: &[f64]) -> Measured {
    let at = |i: usize| row.get(i).copied().unwrap_or(f64::NAN);
    Measured {
        wait: at(0),
        latency: at(1),
        link: at(2),
        ring: at(3),
        hard: at(4).clamp(0.0, 255.0) as u8,
        over_budget: at(5) != 0.0,
        rtt: at(6),
        congested: read_uplink_flags(at(7)).0,
        hardware: read_uplink_flags(at(7)).1,
        confirm: row.get(ROW_FIXED..).unwrap_or_default().to_vec(),
    }
}

/// Splits all-gathered rows of `width` f64s each, written in the layout of wire version
/// `version` ([`row`]), back into measurements. A row whose layout cannot be read is a
/// member whose measurements this round are unknown (every timing NaN, no flag, `slots`
/// unknown plan slots), said in the log; the other rows are read as they are.
pub fn read_rows(version: u8, all: &[u8], width: usize, slots: usize) -> Vec<Measured> {
    if version < row::LAYOUT_VERSION {
        return split_rows(all, width);
    }
    from_f64s(all)
        .chunks_exact(width.max(1))
        .enumerate()
        .map(|(rank, r)| match row::decode(version, r) {
            Ok(legacy) => measured(&legacy),
            Err(e) => {
                tracing::warn!(rank, error = %e, "a member's probe row cannot be read; its measurements this round are unknown");
                Measured::unknown(slots)
            }
        })
        .collect()
}

impl Measured {
    /// A member whose row could not be read: nothing measured, nothing flagged.
    fn unknown(slots: usize) -> Measured {
        Measured {
            wait: f64::NAN,
            latency: f64::NAN,
            link: f64::NAN,
            ring: f64::NAN,
            hard: 0,
            over_budget: false,
            rtt: f64::NAN,
            congested: false,
            hardware: Signs::NONE,
            confirm: vec![f64::NAN; slots],
        }
    }
}

/// Fault injection (tests only, `probe.inject_forge_relayed`): what a forging relay makes
/// of its victim's row in the layout of wire version 3 and later: a hard fault (card
/// dropped) and 10 s for every timing, the rest kept. A row too short for that is left as
/// it is.
pub fn forge_row(block: &mut [u8]) {
    let mut row = from_f64s(block);
    let fixed = row::LAYOUT_HEAD;
    if row.len() < fixed + ROW_FIXED {
        return;
    }
    for i in [0, 1, 2, 3, 6] {
        row[fixed + i] = 10.0;
    }
    row[fixed + 4] = 1.0;
    for v in &mut row[fixed + ROW_FIXED..] {
        *v = 10.0;
    }
    block.copy_from_slice(&f64s(&row));
}

/// The uplink flags field of a row (see [`ROW_FIXED`]).
fn uplink_flags(congested: bool, signs: Signs) -> f64 {
    f64::from(u16::from(congested) | u16::from(signs.bits()) << 1)
}

/// The uplink flags field read back: congested, and the hardware signs. Anything but a
/// whole number below 512 (NaN, negative, fractional, larger) reads as no flag.
fn read_uplink_flags(v: f64) -> (bool, Signs) {
    if v.fract() != 0.0 || !(0.0..512.0).contains(&v) {
        return (false, Signs::NONE);
    }
    let bits = v as u16;
    (bits & 1 == 1, Signs::from_bits((bits >> 1) as u8))
}

/// Runs one round on `comm` with this member's `proposal`.
pub fn round_trip(
    cx: &opentelemetry::Context,
    comm: &mut Communicator,
    s: &ProbeSettings,
    proposal: &Plan,
    own: Contribution,
    bytes_sent: &mut u64,
) -> CollResult<RoundResult> {
    let n = comm.size();
    let mut x = Exchange {
        cx,
        comm,
        s,
        bytes_sent,
    };
    let wait = x.barrier()?;
    let plan = x.agree(proposal)?;
    let latency = x.latency()?;
    let stride = 1 + (plan.round as usize % (n - 1).max(1));
    let rtt = x.ping_pong(stride)?;
    // Over budget (a group decision from the last round), every exchange shrinks to the
    // latency size: detection goes on at a fraction of the bytes.
    let link_bytes = if plan.limited {
        s.small_bytes.max(1)
    } else {
        s.link_bytes.max(1)
    };
    let send = vec![0x5au8; link_bytes];
    let mut recv = vec![0u8; send.len()];
    let link = x.permutation(stride, &send, &mut recv)?;
    let confirm = x.pairs(&plan, &send, &mut recv)?;
    let (ring, ring_run) =
        if !plan.limited && s.ring_every > 0 && plan.round.is_multiple_of(s.ring_every) {
            let (secs, run) = x.ring()?;
            (secs, Some(run))
        } else {
            (f64::NAN, None)
        };
    let mine: Vec<f64> = [
        vec![
            wait,
            latency,
            link,
            ring,
            f64::from(own.hard),
            if own.over_budget { 1.0 } else { 0.0 },
            rtt,
            uplink_flags(own.congested, own.hardware),
        ],
        confirm,
    ]
    .concat();
    let mine = if own.lie {
        // Every timing a liar can report, as slow as it gets; its hard-fault and budget
        // and congestion flags (about itself only) are kept.
        mine.iter()
            .enumerate()
            .map(|(i, v)| if matches!(i, 4 | 5 | 7) { *v } else { 10.0 })
            .collect()
    } else {
        mine
    };
    let measured = x.gather(mine)?;
    Ok(RoundResult {
        wire_version: x.comm.wire_version(),
        certificate_mode: x.comm.certificate_mode(),
        measured,
        stride,
        ring: ring_run,
        plan,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_round_trip() {
        let v = [1.5, f64::NAN, -3.0];
        let back = from_f64s(&f64s(&v));
        assert_eq!(back[0], 1.5);
        assert!(back[1].is_nan());
        assert_eq!(back[2], -3.0);
    }

    #[test]
    fn uplink_flags_carry_congestion_and_signs_and_keep_the_old_form_without_signs() {
        // Without signs the field is 0 or 1, as builds before the signs wrote it.
        assert_eq!(uplink_flags(false, Signs::NONE), 0.0);
        assert_eq!(uplink_flags(true, Signs::NONE), 1.0);
        let both = Signs::PCIE.union(Signs::FRAME_ERRORS);
        // 1 + (2 | 4) << 1 = 13.
        assert_eq!(uplink_flags(true, both), 13.0);
        assert_eq!(read_uplink_flags(13.0), (true, both));
        assert_eq!(read_uplink_flags(2.0), (false, Signs::LINK_SPEED));
        for junk in [f64::NAN, -1.0, 1.5, 512.0, f64::INFINITY] {
            assert_eq!(read_uplink_flags(junk), (false, Signs::NONE), "{junk}");
        }
        // A row as gathered: the flags field is the eighth.
        let row = [0.1, 0.2, 0.3, f64::NAN, 0.0, 0.0, 0.4, 5.0, 0.7];
        let m = split_rows(&f64s(&row), row.len());
        assert!(m[0].congested);
        assert_eq!(m[0].hardware, Signs::PCIE);
        assert_eq!(m[0].confirm, [0.7]);
    }

    #[test]
    fn rows_of_each_version_read_alike_and_an_unreadable_one_is_unknown_not_invented() {
        // Two members' rows of version 2: the fixed fields, then one plan slot.
        let a = [0.1, 0.2, 0.3, f64::NAN, 0.0, 0.0, 0.4, 1.0, 0.7];
        let b = [0.5, 0.6, 0.7, 0.8, 3.0, 1.0, 0.9, 0.0, 0.2];
        let v2 = [a, b].concat();
        let want = split_rows(&f64s(&v2), a.len());
        assert!(want[0].congested && want[1].over_budget && want[1].hard == 3);
        // The same rows at version 3 say their layout and read the same.
        let v3 = [row::encode(3, &a), row::encode(3, &b)].concat();
        let got = read_rows(3, &f64s(&v3), a.len() + 2, 1);
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
        assert_eq!(
            format!("{:?}", read_rows(2, &f64s(&v2), a.len(), 1)),
            format!("{want:?}")
        );
        // A row whose layout is garbage: that member is unknown, the other read as sent.
        let mut bad = v3.clone();
        bad[1] = 99.0;
        let got = read_rows(3, &f64s(&bad), a.len() + 2, 1);
        assert!(got[0].latency.is_nan() && got[0].confirm[0].is_nan());
        assert!(!got[0].over_budget && !got[0].congested && got[0].hard == 0);
        assert_eq!(format!("{:?}", got[1]), format!("{:?}", want[1]));
    }

    /// A member's row with the given latency and budget flag, every other field plausible.
    fn row(latency: f64, over_budget: bool) -> Measured {
        Measured {
            wait: 0.001,
            latency,
            link: 0.002,
            ring: f64::NAN,
            hard: 0,
            over_budget,
            rtt: 0.0005,
            congested: false,
            hardware: Signs::NONE,
            confirm: Vec::new(),
        }
    }

    #[test]
    fn one_member_over_budget_does_not_reduce_the_groups_rounds() {
        let flags =
            |over: &[bool]| -> Vec<Measured> { over.iter().map(|o| row(0.001, *o)).collect() };
        // One member of four says it is over budget every round: the group keeps its
        // full rounds (before, any one flag reduced them).
        assert!(!majority_over_budget(&flags(&[true, false, false, false])));
        // Half is not a majority; three of four is.
        assert!(!majority_over_budget(&flags(&[true, true, false, false])));
        assert!(majority_over_budget(&flags(&[true, true, true, false])));
        // In a pair, both must be over budget.
        assert!(!majority_over_budget(&flags(&[false, true])));
        assert!(majority_over_budget(&flags(&[true, true])));
        assert!(!majority_over_budget(&[]));
    }

    #[test]
    fn one_member_cannot_set_the_groups_latency() {
        let honest = [0.0011, 0.0012, 0.0013, 0.0014];
        let bound = 5.0;
        for lie in [f64::INFINITY, 1e300, f64::NAN, -1.0, 10.0, 4.9, 0.0] {
            let mut m: Vec<Measured> = honest.iter().map(|l| row(*l, false)).collect();
            m.push(row(lie, false));
            let (got, dropped) = group_latency(&m, bound);
            let got = got.unwrap();
            // Whatever the fifth member says, the group's latency stays within the honest
            // members' own reports.
            assert!((0.0012..=0.0013).contains(&got), "{lie}: {got}");
            let out_of_range = !lie.is_finite() || !(0.0..=bound).contains(&lie);
            assert_eq!(dropped, usize::from(out_of_range), "{lie}");
        }
        // Odd count: the middle report; even: the mean of the middle two.
        let m: Vec<Measured> = [0.003, 0.001, 0.002]
            .iter()
            .map(|l| row(*l, false))
            .collect();
        assert_eq!(group_latency(&m, bound), (Some(0.002), 0));
        let (got, _) = group_latency(&m[..2], bound);
        assert!((got.unwrap() - 0.002).abs() < 1e-12);
        // Nothing usable: no latency, every report counted as dropped.
        let m = vec![row(f64::NAN, false), row(f64::INFINITY, false)];
        assert_eq!(group_latency(&m, bound), (None, 2));
    }
}
