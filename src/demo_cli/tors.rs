//! The demo's ToRs: `--tors N` splits the nodes into N ToRs of consecutive nodes (`tor-0`
//! holds the first), written to a topology file that every daemon reads, so the engines
//! judge with the cabling they would have on a cluster. `--slow-tor T=FACTOR` caps every
//! probe that touches a member of ToR T (the members' own sends, and every other node's
//! sends to them) at FACTOR of nominal: a switch that slows all of its ports. `--lossy-tor
//! T=LOSS` makes every NPU port of ToR T's members lose LOSS of its packets on the shared
//! fake fabric (with `--npus`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::Value;

use super::number;
use crate::cli::DemoArgs;

/// ToRs when `--slow-tor` or `--lossy-tor` is given without `--tors`.
const DEFAULT_TORS: usize = 2;

/// The demo's ToRs and their faults.
#[derive(Debug, Clone, PartialEq)]
pub struct Tors {
    /// ToRs.
    pub count: usize,
    /// Nodes.
    nodes: usize,
    /// `--slow-tor`: ToR, factor.
    pub slow: Vec<(usize, f64)>,
    /// `--lossy-tor`: ToR, loss.
    pub lossy: Vec<(usize, f64)>,
}

/// The ToR options, checked; `None` when no ToR option is given (no topology at all).
pub fn parse(a: &DemoArgs) -> anyhow::Result<Option<Tors>> {
    if a.tors.is_none() && a.slow_tor.is_empty() && a.lossy_tor.is_empty() {
        return Ok(None);
    }
    let count = a.tors.unwrap_or(DEFAULT_TORS);
    if !(1..=a.nodes).contains(&count) {
        bail!("--tors must be 1..={} (the nodes; got {count})", a.nodes);
    }
    let slow = tor_values(&a.slow_tor, "--slow-tor", "FACTOR", count)?;
    if let Some((t, f)) = slow
        .iter()
        .find(|(_, f)| f.is_nan() || *f <= 0.0 || *f >= 1.0)
    {
        bail!("--slow-tor {t}={f}: FACTOR must be between 0 and 1 (exclusive)");
    }
    let lossy = tor_values(&a.lossy_tor, "--lossy-tor", "LOSS", count)?;
    if let Some((t, l)) = lossy.iter().find(|(_, l)| !(0.0..=1.0).contains(l)) {
        bail!("--lossy-tor {t}={l}: LOSS must be a fraction from 0 to 1");
    }
    if !lossy.is_empty() && a.npus.is_none() {
        bail!("--lossy-tor needs --npus K (the fake NPU ports per node)");
    }
    Ok(Some(Tors {
        count,
        nodes: a.nodes,
        slow,
        lossy,
    }))
}

/// Parses option `what`'s `TOR=VALUE` items, ToRs 0..`count`.
fn tor_values(
    items: &[String],
    what: &str,
    value: &str,
    count: usize,
) -> anyhow::Result<Vec<(usize, f64)>> {
    items
        .iter()
        .map(|s| {
            let (t, v) = s
                .split_once('=')
                .with_context(|| format!("{what} {s:?}: expected TOR={value}"))?;
            let t: usize = t
                .trim()
                .parse()
                .with_context(|| format!("{what} {s:?}: {t:?} is not a ToR index"))?;
            if t >= count {
                bail!(
                    "{what} {s:?}: ToR {t} does not exist (with --tors {count} the ToRs are 0..{})",
                    count - 1
                );
            }
            Ok((t, number(v, what, s)?))
        })
        .collect()
}

impl Tors {
    /// Node `i`'s ToR: consecutive nodes, as evenly as they divide.
    pub fn of(&self, i: usize) -> usize {
        i * self.count / self.nodes
    }

    /// The members of ToR `t`.
    pub fn members(&self, t: usize) -> Vec<usize> {
        (0..self.nodes).filter(|&i| self.of(i) == t).collect()
    }

    /// The cap on every probe touching node `i` (1: none): its ToR's `--slow-tor` factor.
    pub fn factor(&self, i: usize) -> f64 {
        self.slow
            .iter()
            .filter(|(t, _)| *t == self.of(i))
            .map(|(_, f)| *f)
            .fold(1.0, f64::min)
    }

    /// `--lossy-tor` as lossy ports: every NPU of every member.
    pub fn lossy_ports(&self, npus: usize) -> Vec<(usize, usize, f64)> {
        self.lossy
            .iter()
            .flat_map(|&(t, l)| {
                self.members(t)
                    .into_iter()
                    .flat_map(move |n| (0..npus).map(move |p| (n, p, l)))
            })
            .collect()
    }

    /// Writes the topology file every daemon reads; its path.
    pub fn write(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        let mut text = String::from("# Written by hcclwatch demo: --tors, consecutive nodes.\n");
        for t in 0..self.count {
            let names: Vec<String> = self
                .members(t)
                .iter()
                .map(|i| format!("\"{}\"", node_name(*i)))
                .collect();
            let _ = write!(
                text,
                "\n[[tor]]\nname = \"tor-{t}\"\nnodes = [{}]\n",
                names.join(", ")
            );
        }
        let path = dir.join("topology.toml");
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// Node `rank`'s `[attribution]` and `[topology]` sections (its name, the file).
    pub fn sections(&self, rank: usize, file: &Path) -> String {
        format!(
            "[attribution]\nnode_name = \"{}\"\n[topology]\nfile = \"{}\"\nnode_labels = false\nhypernodes = false\nrefresh = \"2s\"\ndeadline = \"1s\"\n",
            node_name(rank),
            file.display()
        )
    }

    /// What the intro prints.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for t in 0..self.count {
            let members: Vec<String> = self.members(t).iter().map(usize::to_string).collect();
            let _ = write!(out, "  tor-{t}: nodes {}", members.join(", "));
            if let Some((_, f)) = self.slow.iter().find(|(x, _)| *x == t) {
                let _ = write!(out, "; every probe touching them slowed to {f} of nominal");
            }
            if let Some((_, l)) = self.lossy.iter().find(|(x, _)| *x == t) {
                let _ = write!(out, "; their NPU ports lose {l} of their packets");
            }
            out.push('\n');
        }
        out
    }
}

/// The name node `i` goes by in the topology file.
fn node_name(i: usize) -> String {
    format!("demo-node-{i}")
}

/// The view's ToR line: each judged ToR and its verdict, as the daemons decided.
pub fn render(view: &Value) -> String {
    let tors: Vec<String> = view["tors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let name = t["tor"].as_str().unwrap_or("?");
            match t["slowdown_ratio"].as_f64() {
                Some(r) if t["degraded"] == true => format!("{name} DEGRADED ({r:.2}x its normal)"),
                _ => format!("{name} ok"),
            }
        })
        .collect();
    if tors.is_empty() {
        "ToRs: none judged yet\n".to_string()
    } else {
        format!("ToRs: {}\n", tors.join("   "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tors(nodes: usize, count: usize) -> Tors {
        Tors {
            count,
            nodes,
            slow: vec![(1, 0.5)],
            lossy: vec![(0, 0.1)],
        }
    }

    #[test]
    fn nodes_split_into_consecutive_tors() {
        let t = tors(6, 2);
        assert_eq!(t.members(0), vec![0, 1, 2]);
        assert_eq!(t.members(1), vec![3, 4, 5]);
        let t = tors(7, 3);
        assert_eq!(
            (0..3).map(|k| t.members(k)).collect::<Vec<_>>(),
            vec![vec![0, 1, 2], vec![3, 4], vec![5, 6]]
        );
    }

    #[test]
    fn a_slow_tor_caps_its_members_and_a_lossy_tor_is_every_port_of_its_members() {
        let t = tors(6, 2);
        assert_eq!(
            (0..6).map(|i| t.factor(i)).collect::<Vec<_>>(),
            [1.0, 1.0, 1.0, 0.5, 0.5, 0.5]
        );
        assert_eq!(
            t.lossy_ports(2),
            vec![
                (0, 0, 0.1),
                (0, 1, 0.1),
                (1, 0, 0.1),
                (1, 1, 0.1),
                (2, 0, 0.1),
                (2, 1, 0.1)
            ]
        );
    }

    #[test]
    fn the_view_names_each_tor_and_its_verdict() {
        let v = serde_json::json!({"tors": [
            {"tor": "tor-0", "degraded": true, "slowdown_ratio": 1.5, "members": []},
            {"tor": "tor-1", "degraded": false, "slowdown_ratio": null, "members": []}
        ]});
        assert_eq!(
            render(&v),
            "ToRs: tor-0 DEGRADED (1.50x its normal)   tor-1 ok\n"
        );
        assert_eq!(render(&serde_json::json!({})), "ToRs: none judged yet\n");
    }
}
