//! The members' ToRs as the engines number them, and the host engine's ToR verdicts by
//! name.
//!
//! The engines know ToRs as small integers; every member must number them alike, so the
//! number is the index of the ToR's name among the distinct names of the exchanged places,
//! sorted. The names come back here for the state API, the metrics and the log.

use crate::health::{RoundOutput, SpineVerdict};
use crate::snapshot::probe::{
    DeviceView, MemberView, ProbeSnapshot, SpineView, TorUplinksView, TorView,
};

/// A member's ToR name, as its place said.
fn tor_of(m: &MemberView) -> Option<&str> {
    m.place.as_ref().and_then(|p| p.place.tor.as_deref())
}

/// The distinct ToR names of the members' views, sorted: a ToR's number for the engines is
/// its index here.
fn tor_names(members: &[MemberView]) -> Vec<&str> {
    let mut names: Vec<&str> = members.iter().filter_map(tor_of).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Each candidate's ToR as a small integer for the engines: the index of its name among
/// [`tor_names`], so every member (holding the same exchanged places) numbers them alike
/// (empty when no member's ToR is known); and the names the numbers stand for (number k
/// is `names[k]`).
pub(super) fn tor_table(members: &[MemberView]) -> (Vec<Option<u32>>, Vec<String>) {
    let names = tor_names(members);
    if names.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let indices = members
        .iter()
        .map(|m| {
            let t = tor_of(m)?;
            names.binary_search(&t).ok().map(|k| k as u32)
        })
        .collect();
    (indices, names.into_iter().map(str::to_string).collect())
}

/// The members (indices into `part.members`) whose place names ToR `name`.
fn members_of(part: &ProbeSnapshot, name: &str) -> Vec<usize> {
    (0..part.members.len())
        .filter(|&i| tor_of(&part.members[i]) == Some(name))
        .collect()
}

/// The names of `members` (indices into `part.members`), for a log line.
fn names_of<'a>(part: &'a ProbeSnapshot, members: &[usize]) -> Vec<&'a str> {
    members
        .iter()
        .map(|&i| part.members[i].name.as_str())
        .collect()
}

/// Publishes the round's judged ToRs and their verdicts by name (`names`, from
/// [`tor_table`]), logs each ToR verdict as it starts and ends, and counts the normals that
/// changed.
pub(super) fn record_tors(part: &mut ProbeSnapshot, out: &RoundOutput, names: &[String]) {
    let tors: Vec<TorView> = out
        .tors_judged
        .iter()
        .filter_map(|&t| {
            let name = names.get(t as usize)?.as_str();
            let verdict = out.tor_verdicts.iter().find(|v| v.tor == t);
            Some(TorView {
                name: name.to_string(),
                members: members_of(part, name),
                degraded: verdict.is_some(),
                slowdown_ratio: verdict.map(|v| v.excess.exp()),
            })
        })
        .collect();
    let was = |name: &str| part.tors.iter().any(|t| t.name == name && t.degraded);
    for t in &tors {
        if t.degraded && !was(&t.name) {
            let members = names_of(part, &t.members);
            tracing::warn!(tor = %t.name, slowdown_ratio = t.slowdown_ratio.unwrap_or(f64::NAN), members = ?members, "ToR verdict: its members are slow together (the switch, not a node; no node is quarantined for it)");
        }
    }
    for t in part.tors.iter().filter(|t| t.degraded) {
        if !tors.iter().any(|n| n.name == t.name && n.degraded) {
            tracing::info!(tor = %t.name, "ToR verdict ended");
        }
    }
    for &t in &out.tor_new_normal {
        let tor = names.get(t as usize).map_or("?", String::as_str);
        tracing::warn!(
            tor,
            "a ToR's lasting change became its new normal; its verdict ends"
        );
    }
    if out.new_normal {
        tracing::warn!("the group's lasting change became the new normal; the fabric verdict ends");
        part.normal_changes.fabric += 1;
    }
    if out.dip_new_normal {
        tracing::warn!(
            "a partial fabric event (a dip on a share of the pairs) lasted the new-normal horizon; its pairs are the normal now and the fabric verdict ends"
        );
        part.normal_changes.dip += 1;
    }
    part.normal_changes.tor += out.tor_new_normal.len() as u64;
    part.tors = tors;
    record_uplinks(part, &out.tor_uplinks, names);
    record_spine(part, out.spine_verdict.as_ref(), names);
}

/// Publishes the ToRs whose uplinks are marked slow (`marked`: the engine's numbers, with
/// log units against the other ToRs) by name, and logs each mark as it starts and ends.
fn record_uplinks(part: &mut ProbeSnapshot, marked: &[(u32, f64)], names: &[String]) {
    let views: Vec<TorUplinksView> = marked
        .iter()
        .filter_map(|&(t, outside)| {
            let name = names.get(t as usize)?.as_str();
            Some(TorUplinksView {
                name: name.to_string(),
                members: members_of(part, name),
                slowdown_ratio: outside.exp(),
            })
        })
        .collect();
    for v in &views {
        if !part.tor_uplinks.iter().any(|w| w.name == v.name) {
            let members = names_of(part, &v.members);
            tracing::warn!(tor = %v.name, slowdown_ratio = v.slowdown_ratio, members = ?members, "a ToR's uplinks are slow: its members are slow with the rest of the group, not with each other (the uplinks or what lies past them; no ToR verdict, no member is quarantined for it)");
        }
    }
    for w in &part.tor_uplinks {
        if !views.iter().any(|v| v.name == w.name) {
            tracing::info!(tor = %w.name, "a ToR's uplinks are no longer slow");
        }
    }
    part.tor_uplinks = views;
}

/// Forgets the ToR and spine verdicts of both planes (their member indices are those of a
/// former candidate list); the device plane publishes its own again at its next round.
/// Returns the names of the switch verdicts and marks it dropped while they held, and
/// logs them: their start was logged, and an operator reading the log must not take
/// them for still on (the engines judge them afresh from the next round).
pub(super) fn forget(part: &mut ProbeSnapshot) -> Vec<String> {
    let mut dropped: Vec<String> = part
        .tors
        .iter()
        .filter(|t| t.degraded)
        .map(|t| format!("ToR {}", t.name))
        .chain(
            part.tor_uplinks
                .iter()
                .map(|t| format!("ToR {}'s uplinks", t.name)),
        )
        .chain(part.spines.iter().map(|s| format!("spine {}", s.name)))
        .collect();
    part.tors.clear();
    part.tor_uplinks.clear();
    part.spines.clear();
    if let Some(d) = part.device.as_mut() {
        let device = d
            .tor_verdicts
            .iter()
            .map(|t| format!("device ToR {}", t.tor));
        dropped.extend(device.chain(d.spines.iter().map(|s| format!("device spine {}", s.name))));
        d.tor_verdicts.clear();
        d.spines.clear();
    }
    if !dropped.is_empty() {
        tracing::info!(verdicts = ?dropped, "switch verdicts dropped: the probe group's candidate list changed, so they are judged afresh from the next round");
    }
    dropped
}

/// The spine group name of `members` (see [`SpineView::name`]).
fn spine_name<'a>(members: impl Iterator<Item = &'a MemberView>) -> String {
    let mut groups: Vec<&str> = members
        .filter_map(|m| m.place.as_ref().and_then(|p| p.place.spine.as_deref()))
        .collect();
    groups.sort_unstable();
    groups.dedup();
    if groups.is_empty() {
        "unknown".to_string()
    } else {
        groups.join("+")
    }
}

/// Publishes the round's spine verdict by name, and logs it as it starts and ends.
fn record_spine(part: &mut ProbeSnapshot, verdict: Option<&SpineVerdict>, names: &[String]) {
    let view = verdict.map(|v| {
        let tors: Vec<String> = v
            .tors
            .iter()
            .filter_map(|&t| names.get(t as usize).cloned())
            .collect();
        let on = |m: &MemberView| tor_of(m).is_some_and(|t| tors.iter().any(|x| x == t));
        SpineView {
            name: spine_name(part.members.iter().filter(|m| on(m))),
            members: (0..part.members.len())
                .filter(|&i| on(&part.members[i]))
                .collect(),
            tors,
            tor_pairs: v.tor_pairs,
            cross_share: v.cross_share,
            inner_share: v.inner_share,
        }
    });
    log_spine("host", view.as_ref(), part.spines.first());
    part.spines = view.into_iter().collect();
}

/// Logs a spine verdict of `plane` as it starts (`now` without `was`) and ends.
fn log_spine(plane: &str, now: Option<&SpineView>, was: Option<&SpineView>) {
    match (now, was) {
        (Some(v), None) => {
            tracing::warn!(plane, spine = %v.name, tors = ?v.tors, tor_pairs = v.tor_pairs, cross_share = v.cross_share, inner_share = v.inner_share, "spine verdict: a share of the pairs between ToRs is slow, spread over them, and the pairs within ToRs are not (a spine, not a node, port or link; nothing is quarantined for it)");
        }
        (None, Some(was)) => tracing::info!(plane, spine = %was.name, "spine verdict ended"),
        _ => {}
    }
}

/// The device plane's `view` with its spine verdicts named by the spine group of their
/// members (candidate indices into `part.members`), logged as they start and end against
/// the view `part` holds.
pub(super) fn named_device(part: &ProbeSnapshot, mut view: DeviceView) -> DeviceView {
    for s in &mut view.spines {
        s.name = spine_name(s.members.iter().filter_map(|&i| part.members.get(i)));
    }
    let was = part.device.as_ref().and_then(|d| d.spines.first());
    log_spine("device", view.spines.first(), was);
    view
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::TorVerdict;
    use crate::snapshot::topology::{NodePlace, Place, TopologySource};

    fn member(name: &str, tor: Option<&str>) -> MemberView {
        MemberView {
            up: true,
            place: tor.map(|t| NodePlace {
                place: Place {
                    tor: Some(t.to_string()),
                    ..Place::default()
                },
                source: TopologySource::File,
            }),
            ..MemberView::new(name)
        }
    }

    #[test]
    fn tors_are_numbered_by_sorted_name_and_unknown_stays_unknown() {
        let m = |t| member("", t);
        let members = [
            m(Some("tor-z")),
            m(None),
            m(Some("tor-b")),
            m(Some("tor-z")),
        ];
        assert_eq!(tor_table(&members).0, vec![Some(1), None, Some(0), Some(1)]);
        assert_eq!(tor_table(&members).1, vec!["tor-b", "tor-z"]);
        // No ToR known anywhere: the engine's "unknown" (empty).
        assert_eq!(tor_table(&[m(None), m(None)]).0, Vec::<Option<u32>>::new());
    }

    #[test]
    fn a_tor_verdict_is_published_by_name_with_its_members_and_normals_are_counted() {
        let mut part = ProbeSnapshot {
            members: vec![
                member("a", Some("leaf-2")),
                member("b", Some("leaf-1")),
                member("c", Some("leaf-2")),
                member("d", None),
            ],
            ..ProbeSnapshot::default()
        };
        // Numbers are indices into the sorted names: 0 = leaf-1, 1 = leaf-2.
        let out = RoundOutput {
            tors_judged: vec![0, 1],
            tor_verdicts: vec![TorVerdict {
                tor: 1,
                excess: 0.5,
                members: 2,
            }],
            tor_new_normal: vec![0],
            new_normal: true,
            dip_new_normal: true,
            ..RoundOutput::default()
        };
        let names = tor_table(&part.members).1;
        record_tors(&mut part, &out, &names);
        let want = vec![
            TorView {
                name: "leaf-1".into(),
                members: vec![1],
                degraded: false,
                slowdown_ratio: None,
            },
            TorView {
                name: "leaf-2".into(),
                members: vec![0, 2],
                degraded: true,
                slowdown_ratio: Some(0.5f64.exp()),
            },
        ];
        assert_eq!(part.tors, want);
        assert_eq!(
            (
                part.normal_changes.fabric,
                part.normal_changes.tor,
                part.normal_changes.dip
            ),
            (1, 1, 1)
        );
        // A round that judges nothing clears the list; the counts only grow.
        record_tors(&mut part, &RoundOutput::default(), &names);
        assert!(part.tors.is_empty());
        assert_eq!(
            (
                part.normal_changes.fabric,
                part.normal_changes.tor,
                part.normal_changes.dip
            ),
            (1, 1, 1)
        );
    }

    /// A ToR's slow uplinks are published by name with its members and the ratio the
    /// engine's log units stand for, whether or not the ToR was judged this round (the
    /// mark is held through rounds that do not fit it); they go when the mark goes.
    #[test]
    fn slow_uplinks_are_published_by_name_with_their_members() {
        let mut part = ProbeSnapshot {
            members: vec![
                member("a", Some("leaf-2")),
                member("b", Some("leaf-1")),
                member("c", Some("leaf-2")),
            ],
            ..ProbeSnapshot::default()
        };
        let names = tor_table(&part.members).1;
        // leaf-2 (number 1) marked at 0.3 log units, in a round that judged no ToR.
        let out = RoundOutput {
            tor_uplinks: vec![(1, 0.3)],
            ..RoundOutput::default()
        };
        record_tors(&mut part, &out, &names);
        assert!(part.tors.is_empty());
        assert_eq!(
            part.tor_uplinks,
            vec![TorUplinksView {
                name: "leaf-2".into(),
                members: vec![0, 2],
                slowdown_ratio: 0.3f64.exp(),
            }]
        );
        // A number no name stands for is dropped, not published under a made-up name.
        let out = RoundOutput {
            tor_uplinks: vec![(7, 0.3)],
            ..RoundOutput::default()
        };
        record_tors(&mut part, &out, &names);
        assert!(part.tor_uplinks.is_empty());
        record_tors(
            &mut part,
            &RoundOutput {
                tor_uplinks: vec![(0, 0.2)],
                ..RoundOutput::default()
            },
            &names,
        );
        assert_eq!(part.tor_uplinks.len(), 1);
        forget(&mut part);
        assert!(part.tor_uplinks.is_empty());
    }

    /// The spine verdict is published by the names of its ToRs, its members, and the
    /// spine group their topology gives (joined when several, `unknown` with none); it
    /// goes when the engine's verdict goes.
    #[test]
    fn a_spine_verdict_is_published_by_name_with_its_spine_group() {
        let at = |name: &str, tor: &str, spine: Option<&str>| MemberView {
            place: Some(NodePlace {
                place: Place {
                    tor: Some(tor.to_string()),
                    spine: spine.map(String::from),
                    ..Place::default()
                },
                source: TopologySource::File,
            }),
            ..member(name, None)
        };
        let mut part = ProbeSnapshot {
            members: vec![
                at("a", "leaf-1", Some("pod-1")),
                at("b", "leaf-2", Some("pod-1")),
                at("c", "leaf-3", Some("pod-1")),
                at("d", "leaf-4", Some("pod-2")),
            ],
            ..ProbeSnapshot::default()
        };
        let names: Vec<String> = ["leaf-1", "leaf-2", "leaf-3", "leaf-4"]
            .map(String::from)
            .to_vec();
        let verdict = |tors: Vec<u32>| RoundOutput {
            spine_verdict: Some(SpineVerdict {
                tors,
                tor_pairs: 3,
                cross_share: 0.25,
                inner_share: 0.0,
            }),
            ..RoundOutput::default()
        };
        record_tors(&mut part, &verdict(vec![0, 1, 2]), &names);
        let v = &part.spines[..];
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].name, "pod-1");
        assert_eq!(v[0].tors, ["leaf-1", "leaf-2", "leaf-3"]);
        assert_eq!(v[0].members, [0, 1, 2]);
        assert_eq!((v[0].tor_pairs, v[0].cross_share), (3, 0.25));
        record_tors(&mut part, &verdict(vec![0, 2, 3]), &names);
        assert_eq!(part.spines[0].name, "pod-1+pod-2");
        part.members[0].place = None;
        part.members[2].place = None;
        part.members[3] = at("d", "leaf-4", None);
        record_tors(&mut part, &verdict(vec![3]), &names);
        assert_eq!(part.spines[0].name, "unknown");
        record_tors(&mut part, &RoundOutput::default(), &names);
        assert!(part.spines.is_empty());
    }

    /// A device-plane spine verdict is named by the spine group of its members' places
    /// (a member index the candidate list does not hold names nothing), and a view
    /// without one has none.
    #[test]
    fn a_device_spine_verdict_is_named_by_its_members_spine_groups() {
        let at = |name: &str, spine: Option<&str>| MemberView {
            place: Some(NodePlace {
                place: Place {
                    tor: Some(format!("leaf-{name}")),
                    spine: spine.map(String::from),
                    ..Place::default()
                },
                source: TopologySource::NodeLabels,
            }),
            ..member(name, None)
        };
        let part = ProbeSnapshot {
            members: vec![
                at("a", Some("pod-2")),
                at("b", Some("pod-1")),
                at("c", None),
                at("d", Some("pod-2")),
            ],
            ..ProbeSnapshot::default()
        };
        let view = |members: Vec<usize>| DeviceView {
            spines: vec![SpineView {
                name: "unknown".to_string(),
                tors: vec!["leaf-a".to_string()],
                members,
                tor_pairs: 3,
                cross_share: 0.3,
                inner_share: 0.0,
            }],
            ..DeviceView::default()
        };
        let named = named_device(&part, view(vec![0, 1, 2, 3, 9]));
        assert_eq!(named.spines[0].name, "pod-1+pod-2");
        assert_eq!(named.spines[0].tor_pairs, 3);
        assert_eq!(named_device(&part, view(vec![2])).spines[0].name, "unknown");
        assert!(named_device(&part, DeviceView::default()).spines.is_empty());
    }

    /// Forgetting drops the ToR and spine verdicts and the uplinks marks of both planes,
    /// names each for the log, and drops nothing else of the snapshot.
    #[test]
    fn forgetting_drops_both_planes_switch_verdicts() {
        let spine = SpineView {
            name: "pod-1".into(),
            tors: vec!["leaf-1".into()],
            members: vec![0],
            tor_pairs: 3,
            cross_share: 0.3,
            inner_share: 0.0,
        };
        let mut part = ProbeSnapshot {
            members: vec![member("a", None)],
            tors: vec![TorView {
                name: "leaf-1".into(),
                members: vec![0],
                degraded: true,
                slowdown_ratio: Some(1.3),
            }],
            spines: vec![spine.clone()],
            device: Some(DeviceView {
                me: Some(0),
                tor_verdicts: vec![crate::snapshot::probe::DeviceTorView {
                    tor: "leaf-1".into(),
                    members: vec![0],
                    ports: 8,
                    elevated: 6,
                    loss_ratio: 0.05,
                    rtt_level: 0.0,
                    crossing_loss_ratio: None,
                    crossing_slow_share: None,
                    rounds: 3,
                }],
                spines: vec![spine],
                ..DeviceView::default()
            }),
            ..ProbeSnapshot::default()
        };
        part.tor_uplinks = vec![TorUplinksView {
            name: "leaf-2".into(),
            members: vec![0],
            slowdown_ratio: 1.2,
        }];
        let dropped = forget(&mut part);
        assert_eq!(
            dropped,
            [
                "ToR leaf-1",
                "ToR leaf-2's uplinks",
                "spine pod-1",
                "device ToR leaf-1",
                "device spine pod-1"
            ],
            "each dropped verdict named for the log"
        );
        assert!(part.tors.is_empty() && part.spines.is_empty() && part.tor_uplinks.is_empty());
        assert!(
            forget(&mut part).is_empty(),
            "nothing held, nothing dropped"
        );
        let d = part.device.as_ref().expect("the device view stays");
        assert!(d.tor_verdicts.is_empty() && d.spines.is_empty());
        assert_eq!((d.me, part.members.len()), (Some(0), 1));
    }
}
