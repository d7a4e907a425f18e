//! Running a scenario at a probe interval other than the one it is written in.
//!
//! A scenario's `fleet.round_seconds` is the cadence its round-counted fields are written
//! in. Run at probe interval `i`, it becomes the same world in wall-clock time, seen
//! `f = round_seconds / i` times as often: whatever happens per probe (the noise, spikes,
//! link offsets, packet loss) stays; whatever is counted in rounds lasts `f` times as many
//! rounds, and whatever happens per round happens `1/f` as often per round, so that both
//! take as long in seconds as before. The field-by-field decisions are listed in
//! `docs/simulation.md` ("Probe interval").

use std::time::Duration;

use super::scenario::{Scenario, Span};

/// The scenario as seen at a probe interval of `interval` (rescaled from its own
/// `round_seconds`; unchanged when they are equal). Not checked: the caller checks it.
pub fn at_interval(s: &Scenario, interval: Duration) -> Scenario {
    let seconds = interval.as_secs_f64();
    let mut out = rescale(s, s.fleet.round_seconds / seconds);
    out.fleet.round_seconds = seconds;
    out
}

/// The scenario with every round-counted field multiplied by `f`, every per-round rate
/// divided by it, and `round_seconds` divided by it (rounds `f` times as short).
pub fn rescale(s: &Scenario, f: f64) -> Scenario {
    let mut o = s.clone();
    let fl = &mut o.fleet;
    fl.round_seconds /= f;
    fl.rounds = fl.rounds.map(|r| count(r, f, 1));
    fl.warmup_rounds = count(fl.warmup_rounds, f, 0);
    // The drift keeps its correlation time: a^(f·t) after f·t rounds is a^t after t.
    o.noise.drift_ar = o.noise.drift_ar.powf(1.0 / f);
    for c in &mut o.congestion {
        c.rate /= f;
        c.mean_rounds = (c.mean_rounds * f).max(1.0);
        c.max_rounds = c.max_rounds.map(|m| (m * f).max(1.0));
    }
    if let Some(e) = &mut o.expect {
        e.within_rounds = e.within_rounds.map(|w| (w * f).max(1.0));
    }
    // An onset stays inside the run and after the warm-up, which were rounded.
    let first = o.fleet.warmup_rounds as f64;
    let last = (o.rounds() as f64 - 1.0).max(first);
    for x in &mut o.faults {
        x.onset = x
            .onset
            .map(|sp| map_span(sp, |v| (v * f).clamp(first, last)));
        x.rounds = x.rounds.map(|sp| map_span(sp, |v| (v * f).max(1.0)));
        x.ramp_rounds = x.ramp_rounds.map(|r| count(r, f, 1));
        x.period = x.period.map(|r| count(r, f, 2));
        x.down_rounds = x.down_rounds.map(|r| count(r, f, 1));
        x.on_rounds = x.on_rounds.map(|r| (r * f).max(1.0));
        x.off_rounds = x.off_rounds.map(|r| (r * f).max(1.0));
    }
    o
}

/// `n` rounds scaled by `f`, to the nearest round and at least `min`.
fn count(n: u64, f: f64, min: u64) -> u64 {
    ((n as f64 * f).round() as u64).max(min)
}

fn map_span(s: Span, g: impl Fn(f64) -> f64) -> Span {
    match s {
        Span::One(x) => Span::One(g(x)),
        Span::Range([a, b]) => Span::Range([g(a), g(b)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::scenario::{Congestion, Element, FaultKind, FaultSpec, Plane, Shape};

    fn shipped(name: &str) -> Scenario {
        let path = format!("{}/scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"));
        Scenario::load(std::path::Path::new(&path)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn ten_seconds(s: &Scenario) -> Scenario {
        at_interval(s, Duration::from_secs(10))
            .check("rescaled")
            .unwrap()
    }

    /// The 10 s worlds written by hand before the simulator could rescale
    /// (`scenarios/cadence-10s/`, comments left out): the fields that differ from the
    /// 30 s files. Their drift coefficient is 0.9^(1/3) = 0.965489 to four places.
    const QUIET_10S: &str = r#"
        [fleet]
        nodes = 1024
        group_size = 64
        tor_size = 16
        spines = 4
        hours = 24
        seed = 61
        round_seconds = 10
        warmup_rounds = 120
        [noise]
        drift_ar = 0.9655
        [[congestion]]
        on = "uplink"
        rate = 0.00016666667
        mean_rounds = 30
        magnitude_sd = 0.15
        jitter = 1.0
        signal = 0.8
        [[congestion]]
        on = "tor"
        rate = 6.6666667e-05
        mean_rounds = 30
        magnitude_sd = 0.15
        jitter = 1.0
        signal = 0.8
        [[congestion]]
        on = "spine"
        rate = 0.00016666667
        mean_rounds = 30
        magnitude_sd = 0.15
        jitter = 1.0
        signal = 0.8
        [[fault]]
        kind = "fabric_dip"
        count = 6
        share = 0.5
        magnitude = [0.1, 0.3]
        rounds = [30, 90]
    "#;

    /// `campaign` at 10 s by hand: warm-up, drift, the uplink congestion and the dips'
    /// length (the rest is the 30 s file's).
    fn campaign_10s() -> Scenario {
        let mut s = shipped("campaign");
        s.fleet.round_seconds = 10.0;
        s.fleet.warmup_rounds = 120;
        s.noise.drift_ar = 0.9655;
        s.congestion[0].rate = 0.000_166_666_67;
        s.congestion[0].mean_rounds = 30.0;
        let dip = s.faults.iter_mut().find(|f| f.kind == FaultKind::FabricDip);
        dip.unwrap().rounds = Some(Span::One(60.0));
        s
    }

    /// `got` equals `want` in every field, the hand-rounded numbers (drift coefficient to
    /// four places, rates to eight significant digits) within their rounding.
    fn assert_same(mut got: Scenario, mut want: Scenario) {
        assert!(
            (got.noise.drift_ar - want.noise.drift_ar).abs() < 5e-5,
            "drift_ar {} vs {}",
            got.noise.drift_ar,
            want.noise.drift_ar
        );
        got.noise.drift_ar = want.noise.drift_ar;
        assert_eq!(got.congestion.len(), want.congestion.len());
        for (g, w) in got.congestion.iter_mut().zip(&want.congestion) {
            assert!(
                (g.rate / w.rate - 1.0).abs() < 1e-7,
                "{} vs {}",
                g.rate,
                w.rate
            );
            g.rate = w.rate;
        }
        (got.name, got.description) = (String::new(), String::new());
        (want.name, want.description) = (String::new(), String::new());
        assert_eq!(got, want);
    }

    #[test]
    fn quiet_and_campaign_at_10_s_are_the_hand_written_10_s_worlds() {
        let quiet = Scenario::from_toml(QUIET_10S, "quiet-10s").unwrap();
        assert_same(ten_seconds(&shipped("quiet")), quiet);
        assert_same(ten_seconds(&shipped("campaign")), campaign_10s());
        // The coefficient is exact, not the hand-written four places.
        let a = ten_seconds(&shipped("quiet")).noise.drift_ar;
        assert!((a - 0.965_489_38).abs() < 1e-8, "{a}");
    }

    #[test]
    fn rescaling_by_one_is_the_identity() {
        for name in [
            "campaign",
            "device",
            "hard-faults",
            "quiet",
            "shapes",
            "sweep",
            "tor-fabric",
        ] {
            let s = shipped(name);
            assert_eq!(rescale(&s, 1.0), s, "{name}");
            assert_eq!(at_interval(&s, Duration::from_secs(30)), s, "{name}");
        }
        let g = crate::simulate::generate::generate(1_000_003).unwrap();
        assert_eq!(at_interval(&g, Duration::from_secs(30)), g);
    }

    fn spec(kind: FaultKind) -> FaultSpec {
        let text = format!(
            "[fleet]\nnodes = 64\nhours = 1\n[[fault]]\nkind = \"{}\"\n",
            kind.as_str()
        );
        let mut s: Scenario = toml::from_str(&text).unwrap();
        s.faults.remove(0)
    }

    /// A scenario with every kind of fault, every shape and every kind of congestion, in
    /// 30 s rounds.
    fn every_kind() -> Scenario {
        let mut s: Scenario = toml::from_str(
            "[fleet]\nnodes = 64\nnpus_per_node = 4\nhours = 2\nwarmup_rounds = 40\n\
             [noise]\ndrift_ar = 0.8\n",
        )
        .unwrap();
        let congestion = |on, plane, rate, mean_rounds| Congestion {
            on,
            plane,
            rate,
            mean_rounds,
            magnitude_sd: 0.15,
            jitter: 1.0,
            loss: if plane == Plane::Device { 0.01 } else { 0.0 },
            signal: if plane == Plane::Device { 0.0 } else { 0.8 },
            ..Congestion::new(on, plane, rate, mean_rounds, 0.15)
        };
        s.congestion = vec![
            congestion(Element::Uplink, Plane::Host, 0.0006, 10.0),
            congestion(Element::Uplink, Plane::Device, 0.0003, 2.0),
            congestion(Element::Tor, Plane::Both, 0.003, 5.0),
            congestion(Element::Spine, Plane::Host, 0.3, 1.0),
        ];
        let mut slow = spec(FaultKind::SlowNode);
        slow.magnitude = Some(Span::One(0.2));
        slow.onset = Some(Span::Range([40.0, 200.0]));
        slow.shape = Shape::Ramp;
        slow.ramp_rounds = Some(7);
        let mut port = spec(FaultKind::SlowPort);
        port.loss = Some(Span::Range([0.05, 0.3]));
        port.shape = Shape::Flapping;
        port.period = Some(20);
        port.down_rounds = Some(3);
        let mut link = spec(FaultKind::DegradedLink);
        link.magnitude = Some(Span::One(0.25));
        link.shape = Shape::Intermittent;
        link.period = Some(40);
        link.duty = Some(0.25);
        link.rounds = Some(Span::Range([5.0, 30.0]));
        let mut pair = spec(FaultKind::PortPair);
        pair.rtt = Some(Span::One(2.0));
        pair.onset = Some(Span::One(100.0));
        let mut tor = spec(FaultKind::SlowTor);
        tor.magnitude = Some(Span::Range([0.15, 0.4]));
        tor.rounds = Some(Span::Range([20.0, 60.0]));
        let mut dip = spec(FaultKind::FabricDip);
        dip.plane = Some(Plane::Both);
        dip.magnitude = Some(Span::One(0.2));
        dip.rtt = Some(Span::One(2.0));
        dip.share = Some(0.5);
        dip.rounds = Some(Span::One(20.0));
        let mut hard = spec(FaultKind::HardFault);
        hard.rounds = Some(Span::One(1.0));
        s.faults = vec![slow, port, link, pair, tor, dip, hard];
        s.check("every-kind").unwrap()
    }

    #[test]
    fn every_round_counted_field_is_rescaled_and_nothing_else() {
        let s = every_kind();
        let t = ten_seconds(&s);
        // The fleet: the same two hours, three times as many rounds, the same 20 minutes
        // of warm-up.
        assert_eq!(t.fleet.round_seconds, 10.0);
        assert_eq!((t.fleet.hours, t.rounds()), (Some(2.0), 720));
        assert_eq!(t.fleet.warmup_rounds, 120);
        assert_eq!(
            (t.fleet.nodes, t.fleet.npus_per_node, t.fleet.seed),
            (64, 4, 1)
        );
        // Noise per probe stays; the drift keeps its correlation time: 0.8^(1/3).
        assert!(
            (t.noise.drift_ar - 0.928_317_8).abs() < 1e-6,
            "{}",
            t.noise.drift_ar
        );
        assert_eq!(t.noise.drift_sd, s.noise.drift_sd);
        assert_eq!(t.noise.sd, s.noise.sd);
        assert_eq!(t.noise.spike_rate, s.noise.spike_rate);
        assert_eq!(t.device, s.device);
        // Congestion: a third as many starts per round, three times as long.
        let rates: Vec<f64> = t.congestion.iter().map(|c| c.rate).collect();
        let want = [0.0002, 0.0001, 0.001, 0.1];
        for (r, w) in rates.iter().zip(want) {
            assert!((r / w - 1.0).abs() < 1e-12, "{rates:?}");
        }
        let lengths: Vec<f64> = t.congestion.iter().map(|c| c.mean_rounds).collect();
        assert_eq!(lengths, [30.0, 6.0, 15.0, 3.0]);
        assert_eq!(t.congestion[1].loss, 0.01);
        assert_eq!(t.congestion[0].magnitude_sd, 0.15);
        // Which episodes the counters show is a share of episodes, not of rounds.
        assert_eq!(t.congestion[0].signal, 0.8);
        // Faults: onsets, lengths, ramps, periods and down time in rounds times three;
        // magnitudes, losses, shares and duty cycles as they were.
        let f = &t.faults;
        assert_eq!(f[0].onset, Some(Span::Range([120.0, 600.0])));
        assert_eq!(f[0].ramp_rounds, Some(21));
        assert_eq!(f[0].magnitude, Some(Span::One(0.2)));
        assert_eq!((f[1].period, f[1].down_rounds), (Some(60), Some(9)));
        assert_eq!(f[1].loss, Some(Span::Range([0.05, 0.3])));
        assert_eq!((f[2].period, f[2].duty), (Some(120), Some(0.25)));
        assert_eq!(f[2].rounds, Some(Span::Range([15.0, 90.0])));
        assert_eq!(f[3].onset, Some(Span::One(300.0)));
        assert_eq!(f[3].rtt, Some(Span::One(2.0)));
        assert_eq!(f[4].rounds, Some(Span::Range([60.0, 180.0])));
        assert_eq!(
            (f[5].rounds, f[5].share),
            (Some(Span::One(60.0)), Some(0.5))
        );
        assert_eq!(f[6].rounds, Some(Span::One(3.0)));
        for (a, b) in s.faults.iter().zip(f) {
            assert_eq!((a.kind, a.count, a.shape), (b.kind, b.count, b.shape));
        }
    }

    #[test]
    fn a_longer_interval_rounds_to_the_nearest_round_and_keeps_the_minimums() {
        // 30 s rounds seen every 75 s: f = 0.4.
        let t = at_interval(&every_kind(), Duration::from_secs(75));
        assert_eq!(t.fleet.round_seconds, 75.0);
        assert_eq!((t.rounds(), t.fleet.warmup_rounds), (96, 16));
        let f = &t.faults;
        // 7 × 0.4 = 2.8 → 3; 20 × 0.4 = 8, 3 × 0.4 = 1.2 → 1; 40 × 0.4 = 16.
        assert_eq!(f[0].ramp_rounds, Some(3));
        assert_eq!((f[1].period, f[1].down_rounds), (Some(8), Some(1)));
        assert_eq!(f[2].period, Some(16));
        // An onset at the warm-up stays at the (rounded) warm-up; a one-round hard fault
        // and a one-round episode stay one round long.
        assert_eq!(f[0].onset, Some(Span::Range([16.0, 80.0])));
        assert_eq!(f[6].rounds, Some(Span::One(1.0)));
        assert_eq!(t.congestion[3].mean_rounds, 1.0);
        assert!((t.congestion[3].rate - 0.75).abs() < 1e-12);
        let p = at_interval(&every_kind(), Duration::from_secs(300));
        assert_eq!(p.faults[1].period, Some(2), "a period is at least 2 rounds");
        // At 300 s the spine process would start 3 episodes a round: the check says so.
        let e = p.check("s.toml").unwrap_err().to_string();
        assert!(e.contains("congestion[3].rate: 2.99"), "{e}");
        assert!(e.contains("is out of range 0..=1"), "{e}");
    }
}
