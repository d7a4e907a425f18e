//! Pod attribution families: which pods and containers use each NPU, and whether the
//! mapping works. Nothing is written before attribution has a source (see
//! `crate::attribution`), and no series ever carries an empty label: a value that is not
//! known is left out, label and all.
//!
//! Also the `web.pod_labels` hook: [`with_pod_labels`] wraps the NPU collector's sink and
//! adds `namespace`, `pod` and `container` to every series that has an `npu` label, for an
//! NPU that exactly one pod uses. A shared NPU (several pods) gets none of the three on its
//! series, so every series keeps one value and `sum()` over NPUs never double counts;
//! `hcclwatch_npu_allocation_info` lists all of its pods.

use std::collections::BTreeMap;
use std::fmt;

use super::family::{Labels, Render, Sink, flag, unix_seconds};
use crate::snapshot::View;
use crate::snapshot::attribution::AttributionSnapshot;
use crate::snapshot::histogram::Histogram;

/// Renders the attribution part of the snapshot.
#[derive(Debug, Default)]
pub struct AttributionCollector;

impl Render for AttributionCollector {
    fn render(&self, view: &View, f: &mut dyn Sink) -> fmt::Result {
        let Some(a) = &view.attribution else {
            return Ok(());
        };
        health(a, f)?;
        let npu = &view.npu;
        let uuid = |phy: u32| {
            npu.state
                .chips
                .get(&phy)
                .and_then(|c| c.identity.uuid.clone())
                .filter(|u| !u.is_empty())
        };
        let mut alloc = Vec::new();
        for (phy, users) in &a.users {
            for u in users {
                // A pod known by UID only is in the process family, not here.
                let Some(pod) = &u.pod.name else {
                    continue;
                };
                let mut l: Labels = vec![("npu", phy.to_string())];
                l.extend(uuid(*phy).map(|u| ("uuid", u)));
                l.push(("namespace", pod.namespace.clone()));
                l.push(("pod", pod.name.clone()));
                l.extend(u.container.clone().map(|c| ("container", c)));
                alloc.push((l, 1.0));
            }
        }
        f.gauge(
            "hcclwatch_npu_allocation_info",
            "Pods and containers using each NPU (allocated by kubelet or Volcano, or running a process on it); always 1, one series per pod and container, so a shared NPU has several. Join on npu: * on (npu) group_left (namespace, pod, container) where one pod uses each NPU; see docs/attribution.md for shared NPUs.",
            alloc,
        )?;
        f.gauge(
            "hcclwatch_npu_process_container_info",
            "The container of each process DCMI lists on an NPU, from its cgroup; always 1. namespace, pod and container need the Kubernetes API; without it only pod_uid and container_id.",
            a.processes
                .iter()
                .map(|p| {
                    let mut l: Labels = vec![("npu", p.npu.to_string()), ("pid", p.pid.to_string())];
                    if let Some(n) = &p.pod.name {
                        l.push(("namespace", n.namespace.clone()));
                        l.push(("pod", n.name.clone()));
                    }
                    l.extend(p.container.clone().map(|c| ("container", c)));
                    l.extend(p.pod.uid.clone().map(|u| ("pod_uid", u)));
                    l.extend(p.container_id.clone().map(|c| ("container_id", c)));
                    (l, 1.0)
                })
                .collect(),
        )
    }
}

fn health(a: &AttributionSnapshot, f: &mut dyn Sink) -> fmt::Result {
    f.gauge(
        "hcclwatch_pod_attribution_up",
        "Whether every pod attribution source in use answered in the last pass (0: some NPU users may be missing; the log says why).",
        vec![(vec![], flag(a.up()))],
    )?;
    f.gauge(
        "hcclwatch_pod_attribution_source_up",
        "Whether each pod attribution source in use (pod_resources, kubernetes_api, cgroup) answered in the last pass.",
        a.sources
            .iter()
            .map(|(s, st)| (vec![("source", s.as_str().to_string())], flag(st.ok)))
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_pod_attribution_last_success_timestamp_seconds",
        "When every pod attribution source in use last answered in the same pass.",
        a.last_success
            .map(|t| (vec![], unix_seconds(t)))
            .into_iter()
            .collect(),
    )?;
    f.gauge(
        "hcclwatch_pod_attribution_unmapped_device_ids",
        "Ascend device IDs in the last pass that named no NPU: unparsed (an ID form hcclwatch does not know) or unknown_npu (a physical id DCMI does not list).",
        ["unparsed", "unknown_npu"]
            .iter()
            .map(|r| {
                let n = a.unmapped_ids.get(r).copied().unwrap_or(0);
                (vec![("reason", (*r).to_string())], n as f64)
            })
            .collect(),
    )
}

/// A sink that adds the `web.pod_labels` labels to every series with an `npu` label.
pub struct PodLabelSink<'a> {
    inner: &'a mut dyn Sink,
    by_npu: BTreeMap<String, Labels>,
}

/// Wraps `inner` so that per-NPU series get `namespace`, `pod` and `container` when
/// `web.pod_labels` is on and one pod uses the NPU; otherwise series pass through as
/// they are.
pub fn with_pod_labels<'a>(view: &View, inner: &'a mut dyn Sink) -> PodLabelSink<'a> {
    let mut by_npu = BTreeMap::new();
    if let Some(a) = view.attribution.as_ref().filter(|a| a.pod_labels) {
        for npu in a.users.keys() {
            if let Some((pod, container)) = a.sole_pod(*npu) {
                let mut l: Labels = vec![
                    ("namespace", pod.namespace.clone()),
                    ("pod", pod.name.clone()),
                ];
                l.extend(container.map(|c| ("container", c.to_string())));
                by_npu.insert(npu.to_string(), l);
            }
        }
    }
    PodLabelSink { inner, by_npu }
}

impl PodLabelSink<'_> {
    fn label<T>(&self, mut series: Vec<(Labels, T)>) -> Vec<(Labels, T)> {
        if self.by_npu.is_empty() {
            return series;
        }
        for (l, _) in &mut series {
            let taken = l
                .iter()
                .any(|(k, _)| matches!(*k, "namespace" | "pod" | "container"));
            let extra = l
                .iter()
                .find(|(k, _)| *k == "npu")
                .and_then(|(_, v)| self.by_npu.get(v));
            if let (false, Some(extra)) = (taken, extra) {
                l.extend(extra.iter().cloned());
            }
        }
        series
    }
}

impl Sink for PodLabelSink<'_> {
    fn gauge(&mut self, name: &str, help: &str, series: Vec<(Labels, f64)>) -> fmt::Result {
        let series = self.label(series);
        self.inner.gauge(name, help, series)
    }

    fn counter(&mut self, name: &str, help: &str, series: Vec<(Labels, u64)>) -> fmt::Result {
        let series = self.label(series);
        self.inner.counter(name, help, series)
    }

    fn histogram(
        &mut self,
        name: &str,
        help: &str,
        series: Vec<(Labels, &Histogram)>,
    ) -> fmt::Result {
        let series = self.label(series);
        self.inner.histogram(name, help, series)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::*;
    use crate::export::prometheus::{Format, encode, registry};
    use crate::snapshot::Store;
    use crate::snapshot::attribution::{
        Evidence, NpuUser, PodName, PodRef, ProcessOwner, Source, SourceStatus,
    };
    use crate::snapshot::status::BuildInfo;

    fn named(ns: &str, pod: &str) -> PodRef {
        PodRef {
            name: Some(PodName {
                namespace: ns.into(),
                name: pod.into(),
            }),
            uid: None,
        }
    }

    fn user(pod: PodRef, container: Option<&str>) -> NpuUser {
        NpuUser {
            pod,
            container: container.map(str::to_string),
            evidence: BTreeSet::from([Evidence::PodResources]),
            pids: BTreeSet::new(),
        }
    }

    /// Two chips from the fixture (npu 0 and 1): npu 0 used by one pod, npu 1 shared by
    /// two, plus a process known by UID only on npu 0.
    fn store(pod_labels: bool) -> Arc<Store> {
        let store = crate::snapshot::fixture::store(2);
        let mut a = AttributionSnapshot {
            pod_labels,
            ..Default::default()
        };
        a.sources.insert(
            Source::PodResources,
            SourceStatus {
                ok: true,
                error: None,
            },
        );
        a.sources.insert(
            Source::Cgroup,
            SourceStatus {
                ok: false,
                error: Some("x".into()),
            },
        );
        a.users
            .insert(0, vec![user(named("ml", "train-0"), Some("main"))]);
        a.users.insert(
            1,
            vec![
                user(named("ml", "infer-a"), Some("srv")),
                user(named("ml", "infer-b"), None),
            ],
        );
        a.processes.push(ProcessOwner {
            npu: 0,
            pid: 4242,
            container_id: Some("ab".repeat(32)),
            pod: PodRef {
                name: None,
                uid: Some("u-9".into()),
            },
            container: None,
        });
        a.unmapped_ids.insert("unparsed", 2);
        store.publish_attribution(a);
        store
    }

    fn text(store: Arc<Store>) -> String {
        encode(&registry(store, BuildInfo::current()), Format::Text004).unwrap()
    }

    fn lines<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            .collect()
    }

    #[test]
    fn allocation_one_series_per_pod_and_no_empty_label() {
        let t = text(store(false));
        let alloc = lines(&t, "hcclwatch_npu_allocation_info");
        assert_eq!(alloc.len(), 3, "{alloc:#?}");
        assert!(
            alloc.iter().any(|l| l.contains("npu=\"0\"")
                && l.contains("namespace=\"ml\"")
                && l.contains("pod=\"train-0\"")
                && l.contains("container=\"main\"")),
            "{alloc:#?}"
        );
        // The container-less user has no container label at all.
        let b = alloc.iter().find(|l| l.contains("infer-b")).unwrap();
        assert!(!b.contains("container="), "{b}");
        assert!(!t.contains("=\"\""), "an empty label value:\n{t}");
        let p = lines(&t, "hcclwatch_npu_process_container_info");
        assert_eq!(p.len(), 1);
        assert!(
            p[0].contains("pod_uid=\"u-9\"") && !p[0].contains("namespace="),
            "{}",
            p[0]
        );
        assert!(
            t.contains("hcclwatch_pod_attribution_up 0"),
            "cgroup failed"
        );
        assert!(t.contains("hcclwatch_pod_attribution_source_up{source=\"pod_resources\"} 1"));
        assert!(t.contains("hcclwatch_pod_attribution_unmapped_device_ids{reason=\"unparsed\"} 2"));
    }

    #[test]
    fn pod_labels_only_on_npus_with_one_pod() {
        let off = text(store(false));
        assert!(
            !lines(&off, "hcclwatch_npu_temperature_celsius")
                .iter()
                .any(|l| l.contains("pod=")),
            "pod labels without web.pod_labels"
        );
        let on = text(store(true));
        let temp = lines(&on, "hcclwatch_npu_temperature_celsius");
        assert_eq!(temp.len(), 2, "{temp:#?}");
        let t0 = temp.iter().find(|l| l.contains("npu=\"0\"")).unwrap();
        assert!(
            t0.contains("namespace=\"ml\",pod=\"train-0\",container=\"main\""),
            "{t0}"
        );
        let t1 = temp.iter().find(|l| l.contains("npu=\"1\"")).unwrap();
        assert!(!t1.contains("pod="), "shared NPU 1 got a pod label: {t1}");
        // Counters and label-only families (fault codes) get them too; card-level and
        // node-level series do not.
        assert!(
            lines(&on, "hcclwatch_npu_hbm_ecc_errors_total")
                .iter()
                .filter(|l| l.contains("npu=\"0\""))
                .all(|l| l.contains("pod=\"train-0\""))
        );
        assert!(on.contains("hcclwatch_devices 2"));
        // The allocation family keeps its own labels, not a second copy.
        for l in lines(&on, "hcclwatch_npu_allocation_info") {
            assert_eq!(l.matches("pod=").count(), 1, "{l}");
        }
    }

    #[test]
    fn nothing_before_attribution_publishes() {
        let t = text(crate::snapshot::fixture::store(2));
        assert!(!t.contains("attribution"), "{t}");
        assert!(!t.contains("allocation_info"));
    }
}
