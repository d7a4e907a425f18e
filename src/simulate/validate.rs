//! Every rule a scenario must satisfy beyond its types, as `(key, reason)` pairs: ranges,
//! keys that exclude each other, keys that do not apply to a fault's kind or shape, and
//! targets that the probes could never measure.

use super::scenario::{
    Congestion, DipScope, Element, FaultKind, FaultSpec, Lengths, NodeSet, Plane, Scenario, Shape,
    Span,
};

/// Problems collected with their key paths.
struct Out(Vec<(String, String)>);

impl Out {
    fn push(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.0.push((key.into(), reason.into()));
    }

    fn float(&mut self, key: &str, v: f64, lo: f64, hi: f64, why: &str) {
        if !(v.is_finite() && v >= lo && v <= hi) {
            let why = if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            };
            self.push(key, format!("{v} is out of range {lo}..={hi}{why}"));
        }
    }

    fn int(&mut self, key: &str, v: u64, lo: u64, hi: u64) {
        if v < lo || v > hi {
            self.push(key, format!("{v} is out of range {lo}..={hi}"));
        }
    }

    fn span(&mut self, key: &str, s: Span, lo: f64, hi: f64) {
        if s.low() > s.high() {
            self.push(key, format!("[{}, {}]: low above high", s.low(), s.high()));
        }
        for v in [s.low(), s.high()] {
            if !(v.is_finite() && v >= lo && v <= hi) {
                self.push(key, format!("{v} is out of range {lo}..={hi}"));
                break;
            }
        }
    }
}

/// Every problem of `s`, as `(key path, reason)`.
pub fn problems(s: &Scenario) -> Vec<(String, String)> {
    let mut o = Out(Vec::new());
    fleet(s, &mut o);
    noise(s, &mut o);
    let d = &s.device;
    o.int("device.pings_per_round", d.pings_per_round as u64, 1, 64);
    o.int("device.packets", u64::from(d.packets), 1, 1000);
    o.float("device.rtt_us", d.rtt_us, 0.1, 1e6, "");
    o.float("device.rtt_sd", d.rtt_sd, 0.0, 2.0, "");
    o.float("device.loss", d.loss, 0.0, 0.5, "");
    for (i, c) in s.congestion.iter().enumerate() {
        congestion(s, c, &format!("congestion[{i}]"), &mut o);
    }
    let mut nodes_needed = 0;
    for (i, f) in s.faults.iter().enumerate() {
        nodes_needed += fault(s, f, &format!("fault[{i}]"), &mut o);
    }
    if nodes_needed > s.fleet.nodes {
        o.push(
            "fault",
            format!(
                "the faults need {nodes_needed} distinct nodes, the fleet has {}",
                s.fleet.nodes
            ),
        );
    }
    counters(s, &mut o);
    expect(s, &mut o);
    o.0
}

fn counters(s: &Scenario, o: &mut Out) {
    let c = &s.counters;
    o.int("counters.lag", c.lag, 0, 3);
    o.float("counters.miss", c.miss, 0.0, 1.0, "a share of node-rounds");
    o.float(
        "counters.false_alarm",
        c.false_alarm,
        0.0,
        1.0,
        "a share of node-rounds",
    );
    o.float(
        "counters.hardware_false",
        c.hardware_false,
        0.0,
        1.0,
        "a share of node-rounds",
    );
}

fn expect(s: &Scenario, o: &mut Out) {
    let Some(e) = &s.expect else { return };
    let n = s.fleet.nodes;
    for (name, set) in [
        ("may_cordon", &e.may_cordon),
        ("must_cordon", &e.must_cordon),
    ] {
        if let NodeSet::List(v) = set
            && let Some(x) = v.iter().find(|x| **x >= n)
        {
            o.push(
                format!("expect.{name}"),
                format!("node {x} is not in the fleet of {n}"),
            );
        }
    }
    if let Some(w) = e.within_rounds {
        o.float("expect.within_rounds", w, 1.0, 1e7, "");
    }
}

fn fleet(s: &Scenario, o: &mut Out) {
    let f = &s.fleet;
    o.int("fleet.nodes", f.nodes as u64, 4, 10_000);
    o.int("fleet.group_size", f.group_size as u64, 2, 1024);
    o.int("fleet.npus_per_node", f.npus_per_node as u64, 0, 16);
    o.int(
        "fleet.tor_size",
        f.tor_size as u64,
        1,
        f.nodes.max(1) as u64,
    );
    o.int("fleet.spines", f.spines as u64, 1, 64);
    o.float("fleet.round_seconds", f.round_seconds, 0.1, 3600.0, "");
    if f.npus_per_node * f.group_size.min(f.nodes) > 8192 {
        o.push(
            "fleet.npus_per_node",
            format!(
                "{} NPU ports per probe group (group_size × npus_per_node) is more than 8192",
                f.npus_per_node * f.group_size.min(f.nodes)
            ),
        );
    }
    match (f.hours, f.rounds) {
        (Some(_), Some(_)) => o.push("fleet.hours", "give `hours` or `rounds`, not both"),
        (None, None) => o.push("fleet", "give `hours` or `rounds`"),
        (Some(h), None) => o.float("fleet.hours", h, 0.01, 1000.0, ""),
        (None, Some(r)) => o.int("fleet.rounds", r, 1, 1_000_000),
    }
    let rounds = s.rounds();
    if rounds > 0 && rounds < f.warmup_rounds + 20 {
        o.push(
            "fleet.warmup_rounds",
            format!(
                "the run ({rounds} rounds) must be at least 20 rounds longer than the warm-up ({})",
                f.warmup_rounds
            ),
        );
    }
}

fn noise(s: &Scenario, o: &mut Out) {
    let n = &s.noise;
    o.float("noise.sd", n.sd, 0.0, 1.0, "");
    o.float("noise.link_offset_sd", n.link_offset_sd, 0.0, 1.0, "");
    if !(n.dof > 2.0 && n.dof <= 1000.0) {
        o.push(
            "noise.dof",
            format!(
                "{} must be above 2 (so that the variance exists) and at most 1000",
                n.dof
            ),
        );
    }
    o.float("noise.mixture_share", n.mixture_share, 0.0, 1.0, "");
    o.float("noise.mixture_sd", n.mixture_sd, 0.0, 2.0, "");
    o.float("noise.spike_rate", n.spike_rate, 0.0, 1.0, "");
    o.float("noise.spike_sd", n.spike_sd, 0.0, 2.0, "");
    o.float("noise.drift_sd", n.drift_sd, 0.0, 1.0, "");
    o.float("noise.drift_ar", n.drift_ar, 0.0, 0.999, "");
    o.float("noise.daily_amplitude", n.daily_amplitude, 0.0, 1.0, "");
    o.float(
        "noise.daily_phase_hours",
        n.daily_phase_hours,
        0.0,
        24.0,
        "",
    );
    o.float(
        "noise.busy_rate",
        n.busy_rate,
        0.0,
        1.0,
        "a share of node-rounds",
    );
}

fn congestion(s: &Scenario, c: &Congestion, k: &str, o: &mut Out) {
    let key = |x: &str| format!("{k}.{x}");
    o.float(
        &key("rate"),
        c.rate,
        0.0,
        1.0,
        "episode starts per element per round",
    );
    o.float(&key("mean_rounds"), c.mean_rounds, 1.0, 1e6, "");
    o.float(&key("magnitude_sd"), c.magnitude_sd, 0.0, 2.0, "");
    o.float(&key("jitter"), c.jitter, 0.0, 5.0, "");
    o.float(&key("loss"), c.loss, 0.0, 1.0, "");
    o.float(
        &key("signal"),
        c.signal,
        0.0,
        1.0,
        "a probability: the share of episodes the nodes' counters show",
    );
    let npus = s.fleet.npus_per_node;
    if c.plane.device() && npus == 0 {
        o.push(
            key("plane"),
            "the device plane needs NPU ports: set fleet.npus_per_node",
        );
    }
    if c.on == Element::Uplink && c.plane == Plane::Both {
        o.push(
            key("plane"),
            "an uplink is a host NIC's (plane \"host\") or one NPU port's (plane \"device\"), not both",
        );
    }
    if c.loss > 0.0 && !c.plane.device() {
        o.push(
            key("loss"),
            "loss applies to NPU-port pings; this process is on the host plane",
        );
    }
    lengths(c, k, o);
    let tors = s.fleet.nodes.div_ceil(s.fleet.tor_size.max(1));
    let (limit, what) = match (c.on, c.plane) {
        (Element::Uplink, Plane::Device) => (s.fleet.nodes * npus, "NPU ports"),
        (Element::Uplink, _) => (s.fleet.nodes, "nodes"),
        (Element::Tor, _) => (tors, "ToRs"),
        (Element::Spine, _) => (s.fleet.spines, "spines"),
    };
    if let Some(x) = c.at.iter().find(|x| **x >= limit) {
        o.push(
            key("at"),
            format!("{x} is not one of the fleet's {limit} {what}"),
        );
    }
}

/// The episode-length keys: each only with its distribution.
fn lengths(c: &Congestion, k: &str, o: &mut Out) {
    let key = |x: &str| format!("{k}.{x}");
    match (c.length_sd, c.lengths) {
        (Some(x), Lengths::Lognormal) => o.float(&key("length_sd"), x, 0.01, 5.0, ""),
        (Some(_), l) => o.push(
            key("length_sd"),
            format!(
                "length_sd applies to lognormal lengths, not to {}",
                lengths_name(l)
            ),
        ),
        _ => {}
    }
    match (c.length_alpha, c.lengths) {
        (Some(x), Lengths::Pareto) if !(x > 1.0 && x <= 10.0) => o.push(
            key("length_alpha"),
            format!("{x} is out of range (1, 10] (above 1, so that the mean exists)"),
        ),
        (Some(_), Lengths::Pareto) => {}
        (Some(_), l) => o.push(
            key("length_alpha"),
            format!(
                "length_alpha applies to pareto lengths, not to {}",
                lengths_name(l)
            ),
        ),
        _ => {}
    }
    if let Some(m) = c.max_rounds {
        o.float(&key("max_rounds"), m, 1.0, 1e7, "");
    }
}

fn lengths_name(l: Lengths) -> &'static str {
    match l {
        Lengths::Exponential => "exponential",
        Lengths::Uniform => "uniform",
        Lengths::Lognormal => "lognormal",
        Lengths::Pareto => "pareto",
    }
}

/// The plane a fault touches.
pub fn fault_plane(f: &FaultSpec) -> Plane {
    match f.kind {
        FaultKind::SlowPort | FaultKind::PortPair => Plane::Device,
        FaultKind::DegradedLink | FaultKind::HardFault => Plane::Host,
        _ => f.plane.unwrap_or(Plane::Host),
    }
}

/// How many faults a spec stands for.
pub fn fault_count(s: &Scenario, f: &FaultSpec) -> usize {
    let listed = f.nodes.len() + f.links.len() + f.ports.len() + f.port_pairs.len() + f.tors.len();
    if listed > 0 {
        return listed;
    }
    match f.kind {
        FaultKind::FabricDip => f.count,
        _ => f
            .count
            .max(f.per_nodes.map_or(0, |p| s.fleet.nodes / p.max(1))),
    }
}

/// Checks one fault; returns how many distinct nodes it needs.
fn fault(s: &Scenario, f: &FaultSpec, k: &str, o: &mut Out) -> usize {
    let key = |x: &str| format!("{k}.{x}");
    let kind = f.kind.as_str();
    let plane = fault_plane(f);
    if f.plane.is_some()
        && !matches!(
            f.kind,
            FaultKind::SlowNode | FaultKind::SlowTor | FaultKind::FabricDip
        )
    {
        o.push(
            key("plane"),
            format!("plane applies to slow_node, slow_tor and fabric_dip, not to {kind}"),
        );
    }
    if plane.device() && s.fleet.npus_per_node == 0 {
        o.push(
            key("kind"),
            format!("{kind} needs NPU ports: set fleet.npus_per_node"),
        );
    }
    o.int(&key("count"), f.count as u64, 1, s.fleet.nodes as u64);
    if let Some(p) = f.per_nodes {
        o.int(&key("per_nodes"), p as u64, 1, 10_000);
    }
    targets(s, f, k, o);
    effects(f, plane, k, o);
    timing(s, f, k, o);
    rough(s, f, plane, k, o);
    let n = fault_count(s, f);
    match f.kind {
        FaultKind::SlowNode | FaultKind::HardFault | FaultKind::SlowPort => n,
        FaultKind::DegradedLink | FaultKind::PortPair => 2 * n,
        FaultKind::SlowTor => n * s.fleet.tor_size,
        FaultKind::FabricDip => 0,
    }
}

/// Listed targets: allowed for this kind, in range, measurable.
fn targets(s: &Scenario, f: &FaultSpec, k: &str, o: &mut Out) {
    let key = |x: &str| format!("{k}.{x}");
    let kind = f.kind.as_str();
    let lists: [(&str, usize, &[FaultKind]); 5] = [
        (
            "nodes",
            f.nodes.len(),
            &[FaultKind::SlowNode, FaultKind::HardFault],
        ),
        ("links", f.links.len(), &[FaultKind::DegradedLink]),
        ("ports", f.ports.len(), &[FaultKind::SlowPort]),
        ("port_pairs", f.port_pairs.len(), &[FaultKind::PortPair]),
        ("tors", f.tors.len(), &[FaultKind::SlowTor]),
    ];
    let mut listed = 0;
    for (name, len, kinds) in lists {
        if len > 0 && !kinds.contains(&f.kind) {
            o.push(key(name), format!("{name} does not apply to {kind}"));
        }
        listed += len;
    }
    if listed > 0 && (f.count > 1 || f.per_nodes.is_some()) {
        o.push(
            key("count"),
            format!(
                "count and per_nodes apply to faults placed at random; {listed} targets are listed"
            ),
        );
    }
    let n = s.fleet.nodes;
    let npus = s.fleet.npus_per_node;
    for x in &f.nodes {
        if *x >= n {
            o.push(key("nodes"), format!("node {x} is not in the fleet of {n}"));
        }
    }
    let pair = |a: usize, b: usize, what: &str, o: &mut Out| {
        if a >= n || b >= n {
            o.push(
                key(what),
                format!("[{a}, {b}]: a node is not in the fleet of {n}"),
            );
        } else if a == b {
            o.push(
                key(what),
                format!("[{a}, {b}]: both ends are the same node"),
            );
        }
        // Ends in different probe groups are allowed: no probe measures such a link, and
        // the report says so (it is a miss of the monitor's coverage, not of the world).
    };
    for [a, b] in &f.links {
        pair(*a, *b, "links", o);
    }
    for [a, b, c, d] in &f.port_pairs {
        pair(*a, *c, "port_pairs", o);
        if *b >= npus || *d >= npus {
            o.push(
                key("port_pairs"),
                format!("an NPU number is not below {npus}"),
            );
        }
    }
    for [a, p] in &f.ports {
        if *a >= n || *p >= npus {
            o.push(
                key("ports"),
                format!("[{a}, {p}] is not a port of the fleet ({n} nodes × {npus} NPUs)"),
            );
        }
    }
    let tors = n.div_ceil(s.fleet.tor_size.max(1));
    for t in &f.tors {
        if *t >= tors {
            o.push(
                key("tors"),
                format!("ToR {t} is not one of the fleet's {tors}"),
            );
        }
    }
    if f.both_directions && f.kind != FaultKind::DegradedLink {
        o.push(
            key("both_directions"),
            format!("both_directions applies to degraded_link, not to {kind}"),
        );
    }
}

/// Magnitude (host), loss and rtt (device) and share: present where they apply only.
fn effects(f: &FaultSpec, plane: Plane, k: &str, o: &mut Out) {
    let key = |x: &str| format!("{k}.{x}");
    let kind = f.kind.as_str();
    let hard = f.kind == FaultKind::HardFault;
    match f.magnitude {
        Some(m) if plane.host() && !hard => o.span(&key("magnitude"), m, 0.0, 10.0),
        Some(_) => o.push(
            key("magnitude"),
            format!(
                "magnitude is a host-plane slowdown; it does not apply to {kind} on this plane"
            ),
        ),
        None if plane.host() && !hard => o.push(
            key("magnitude"),
            format!("{kind} on the host plane needs a magnitude (0.2 = 20 % slower)"),
        ),
        None => {}
    }
    for (name, v, lo, hi) in [("loss", f.loss, 0.0, 1.0), ("rtt", f.rtt, 1.0, 1000.0)] {
        match v {
            Some(x) if plane.device() => o.span(&key(name), x, lo, hi),
            Some(_) => o.push(
                key(name),
                format!("{name} applies to NPU-port pings; {kind} here is on the host plane"),
            ),
            None => {}
        }
    }
    if plane.device() && f.loss.is_none() && f.rtt.is_none() && f.shape != Shape::Flapping {
        o.push(
            key("kind"),
            format!("{kind} on the device plane needs loss (0..1) or rtt (a multiplier ≥ 1)"),
        );
    }
    match f.share {
        Some(x) if f.kind == FaultKind::FabricDip && !(x > 0.0 && x <= 1.0) => {
            o.push(key("share"), format!("{x} is out of range (0, 1]"));
        }
        Some(_) if f.kind != FaultKind::FabricDip => {
            o.push(
                key("share"),
                format!("share applies to fabric_dip, not to {kind}"),
            );
        }
        _ => {}
    }
}

/// Onset, duration and the shape's parameters.
fn timing(s: &Scenario, f: &FaultSpec, k: &str, o: &mut Out) {
    let key = |x: &str| format!("{k}.{x}");
    let rounds = s.rounds() as f64;
    if let Some(on) = f.onset {
        o.span(
            &key("onset"),
            on,
            s.fleet.warmup_rounds as f64,
            (rounds - 1.0).max(0.0),
        );
    }
    if let Some(r) = f.rounds {
        o.span(&key("rounds"), r, 1.0, 1e7);
    }
    let kind = f.kind.as_str();
    let shape = f.shape;
    let wants = |p: &str| match p {
        "ramp_rounds" => shape == Shape::Ramp,
        "period" => matches!(shape, Shape::Intermittent | Shape::Flapping),
        "duty" => shape == Shape::Intermittent,
        "on_rounds" | "off_rounds" => shape == Shape::Random,
        _ => shape == Shape::Flapping,
    };
    let given = [
        ("ramp_rounds", f.ramp_rounds.is_some()),
        ("period", f.period.is_some()),
        ("duty", f.duty.is_some()),
        ("down_rounds", f.down_rounds.is_some()),
        ("on_rounds", f.on_rounds.is_some()),
        ("off_rounds", f.off_rounds.is_some()),
    ];
    for (p, is) in given {
        if is && !wants(p) {
            o.push(
                key(p),
                format!("{p} does not apply to the {shape:?} shape").to_lowercase(),
            );
        } else if !is && wants(p) {
            o.push(
                key(p),
                format!("the {shape:?} shape needs {p}").to_lowercase(),
            );
        }
    }
    if let Some(r) = f.ramp_rounds {
        o.int(&key("ramp_rounds"), r, 1, 100_000);
    }
    if let Some(p) = f.period {
        o.int(&key("period"), p, 2, 100_000);
    }
    for (p, v) in [("on_rounds", f.on_rounds), ("off_rounds", f.off_rounds)] {
        if let Some(x) = v {
            o.float(&key(p), x, 1.0, 1e6, "mean rounds");
        }
    }
    if let Some(d) = f.duty
        && !(d > 0.0 && d < 1.0)
    {
        o.push(key("duty"), format!("{d} is out of range (0, 1)"));
    }
    if let (Some(d), Some(p)) = (f.down_rounds, f.period)
        && (d == 0 || d >= p)
    {
        o.push(
            key("down_rounds"),
            format!("{d} must be at least 1 and below the period ({p})"),
        );
    }
    if shape == Shape::Flapping
        && !matches!(
            f.kind,
            FaultKind::DegradedLink | FaultKind::SlowPort | FaultKind::PortPair
        )
    {
        o.push(
            key("shape"),
            format!("flapping applies to links and ports, not to {kind}"),
        );
    }
    if f.kind == FaultKind::HardFault && shape != Shape::Step {
        o.push(
            key("shape"),
            "a hard fault is a step (transient with `rounds`, else persistent)",
        );
    }
}

/// The rougher world's fault keys: a varying slowdown, a dip's scope, links between
/// probe groups, a hard fault that silences the NPU pings.
fn rough(s: &Scenario, f: &FaultSpec, plane: Plane, k: &str, o: &mut Out) {
    let key = |x: &str| format!("{k}.{x}");
    let kind = f.kind.as_str();
    if let Some(x) = f.spread {
        if f.magnitude.is_some() && plane.host() {
            o.float(&key("spread"), x, 0.0, 3.0, "a share of the magnitude");
        } else {
            o.push(
                key("spread"),
                format!("spread varies a host-plane magnitude; {kind} here has none"),
            );
        }
    }
    dip_scope(s, f, k, o);
    if f.between_groups {
        let listed = !f.links.is_empty() || !f.port_pairs.is_empty();
        let groups = crate::health::plan::balanced_groups(s.fleet.nodes, s.fleet.group_size);
        if !matches!(f.kind, FaultKind::DegradedLink | FaultKind::PortPair) {
            o.push(
                key("between_groups"),
                format!("between_groups applies to degraded_link and port_pair, not to {kind}"),
            );
        } else if listed {
            o.push(
                key("between_groups"),
                "between_groups places links at random; listed links are taken as written",
            );
        } else if groups.len() < 2 {
            o.push(
                key("between_groups"),
                format!(
                    "the fleet is one probe group (at most {} members): no link is between groups",
                    s.fleet.group_size
                ),
            );
        }
    }
    if let Some(h) = f.hardware {
        if !matches!(f.kind, FaultKind::SlowNode | FaultKind::SlowPort) {
            o.push(
                key("hardware"),
                format!("hardware applies to slow_node and slow_port, not to {kind}"),
            );
        } else {
            o.float(&key("hardware"), h, 0.0, 1.0, "a chance");
        }
    }
    if f.silent {
        if f.kind != FaultKind::HardFault {
            o.push(
                key("silent"),
                format!("silent applies to hard_fault, not to {kind}"),
            );
        } else if s.fleet.npus_per_node == 0 {
            o.push(
                key("silent"),
                "a silent hard fault loses its node's NPU pings: set fleet.npus_per_node",
            );
        }
    }
}

/// A fabric dip's scope and the elements it names.
fn dip_scope(s: &Scenario, f: &FaultSpec, k: &str, o: &mut Out) {
    let key = |x: &str| format!("{k}.{x}");
    let kind = f.kind.as_str();
    if f.kind != FaultKind::FabricDip {
        if f.scope.is_some() {
            o.push(
                key("scope"),
                format!("scope applies to fabric_dip, not to {kind}"),
            );
        }
        if !f.at.is_empty() {
            o.push(
                key("at"),
                format!("at applies to fabric_dip, not to {kind}"),
            );
        }
        return;
    }
    let scope = f.scope.unwrap_or(DipScope::Random);
    let tors = s.fleet.nodes.div_ceil(s.fleet.tor_size.max(1));
    let (want, limit, what) = match scope {
        DipScope::Random | DipScope::CrossGroup => (0, 0, ""),
        DipScope::Spine => (1, s.fleet.spines, "spines"),
        DipScope::TorPair => (2, tors, "ToRs"),
        DipScope::TorUplinks => (1, tors, "ToRs"),
    };
    if f.share.is_some() && want > 0 {
        o.push(
            key("share"),
            format!(
                "share applies to the random and cross_group scopes, not to {}",
                scope.as_str()
            ),
        );
    }
    if !f.at.is_empty() {
        if want == 0 {
            o.push(
                key("at"),
                format!(
                    "at names the spine or ToRs of a dip; the {} scope has none",
                    scope.as_str()
                ),
            );
        } else if f.at.len() != want {
            o.push(
                key("at"),
                format!(
                    "the {} scope names {want} of the fleet's {what}",
                    scope.as_str()
                ),
            );
        } else if let Some(x) = f.at.iter().find(|x| **x >= limit) {
            o.push(
                key("at"),
                format!("{x} is not one of the fleet's {limit} {what}"),
            );
        } else if want == 2 && f.at[0] == f.at[1] {
            o.push(key("at"), "a ToR pair is two different ToRs");
        }
    }
    let needs_two_tors = matches!(
        scope,
        DipScope::TorPair | DipScope::TorUplinks | DipScope::Spine
    );
    if needs_two_tors && tors < 2 {
        o.push(
            key("scope"),
            format!(
                "the {} scope needs at least two ToRs; the fleet has {tors}",
                scope.as_str()
            ),
        );
    }
    if scope == DipScope::CrossGroup
        && crate::health::plan::balanced_groups(s.fleet.nodes, s.fleet.group_size).len() < 2
    {
        o.push(
            key("scope"),
            "the fleet is one probe group: no link is between groups",
        );
    }
}
