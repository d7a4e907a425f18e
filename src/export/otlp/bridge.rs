//! Observable instruments over the typed snapshot.
//!
//! The SDK's periodic reader calls every instrument's callback once per collection. The
//! callbacks of one collection share one rendering: the first takes one [`View`] of the
//! store and renders every collector from it, and the others (the `hw.*` instruments
//! included, which read that view's chips) reuse it, so one export is one moment of the
//! store and the snapshot is rendered once per collection, not once per family. The
//! rendering belongs to a collection: it is not reused once that collection's export has
//! started ([`Collections`]), nor after half an export interval (a collection whose
//! export the SDK skipped). Families appear as the daemon gets going (probing starts, a
//! collector's first reading), so [`Bridge::discover`] registers an instrument for each
//! new family; the `hw.*` instruments are registered once.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter};

use super::exporters::Collections;
use super::families::{Collected, Families, ucum};
use super::hw::{HW, Kind};
use crate::export::prometheus::family::Render;
use crate::snapshot::{Store, View};

/// Every collector's families from one view, and the view (for the `hw.*` instruments).
struct Rendering {
    families: Families,
    view: View,
}

/// The rendering the callbacks of one collection share.
struct Shared {
    /// [`Collections::finished`] when it was made: it serves that collection only.
    collection: u64,
    at: Instant,
    rendering: Arc<Rendering>,
}

/// The collectors, the current collection's rendering, and the instruments registered so
/// far.
pub struct Bridge {
    store: Arc<Store>,
    collectors: Vec<Box<dyn Render>>,
    collections: Arc<Collections>,
    /// The longest a rendering serves: half the export interval, so even a collection
    /// whose export was skipped (nothing to export, or a failed collection) never lends
    /// its rendering to the next one.
    max_age: Duration,
    cache: Mutex<Option<Shared>>,
    known: Mutex<BTreeSet<String>>,
    meter: Meter,
}

/// Where a bridge reads and what it renders.
pub struct Sources {
    /// The store.
    pub store: Arc<Store>,
    /// The Prometheus collectors, in exposition order.
    pub collectors: Vec<Box<dyn Render>>,
    /// Counts the collections the metric exporter has finished.
    pub collections: Arc<Collections>,
    /// The export interval.
    pub interval: Duration,
}

fn attrs(a: &[(String, String)]) -> Vec<KeyValue> {
    a.iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect()
}

impl Bridge {
    /// A bridge rendering `sources.collectors` over `sources.store` into instruments of
    /// `meter`.
    pub fn new(sources: Sources, meter: Meter) -> Arc<Self> {
        Arc::new(Self {
            store: sources.store,
            collectors: sources.collectors,
            collections: sources.collections,
            max_age: sources.interval / 2,
            cache: Mutex::new(None),
            known: Mutex::new(BTreeSet::new()),
            meter,
        })
    }

    /// The current collection's rendering: made by its first callback, shared by the rest.
    fn snapshot(&self) -> Arc<Rendering> {
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let collection = self.collections.finished();
        if let Some(s) = c.as_ref()
            && s.collection == collection
            && s.at.elapsed() < self.max_age
        {
            return s.rendering.clone();
        }
        let rendering = Arc::new(self.render());
        *c = Some(Shared {
            collection,
            at: Instant::now(),
            rendering: rendering.clone(),
        });
        rendering
    }

    /// Every collector's families from one fresh view.
    fn render(&self) -> Rendering {
        let view = self.store.view();
        let mut out = Collected::default();
        for r in &self.collectors {
            // A collector that fails mid-way keeps what it wrote; the rest still render.
            let _ = r.render(&view, &mut out);
        }
        Rendering {
            families: out.0,
            view,
        }
    }

    /// Registers an observable instrument for every family not seen before.
    pub fn discover(self: &Arc<Self>) {
        // Always a fresh rendering, and not the collection's: a cached one from just
        // before a family appeared would hide it (at shutdown, for good), and replacing
        // the collection's own mid-way would mix two views in one export.
        let snap = self.render().families;
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        for (name, fam) in snap.iter() {
            if !known.insert(name.clone()) {
                continue;
            }
            let weak: Weak<Bridge> = Arc::downgrade(self);
            let key = name.clone();
            let observe = move |o: &dyn AsyncInstrument<f64>| {
                let Some(b) = weak.upgrade() else { return };
                if let Some(f) = b.snapshot().families.get(&key) {
                    for (l, v) in &f.samples {
                        o.observe(*v, &attrs(l));
                    }
                }
            };
            if fam.counter {
                self.meter
                    .f64_observable_counter(name.clone())
                    .with_description(fam.help.clone())
                    .with_unit(ucum(name))
                    .with_callback(observe)
                    .build();
            } else {
                self.meter
                    .f64_observable_gauge(name.clone())
                    .with_description(fam.help.clone())
                    .with_unit(ucum(name))
                    .with_callback(observe)
                    .build();
            }
        }
    }

    /// Registers the `hw.*` instruments (once; each reads the chips of the NPU part).
    pub fn register_hw(self: &Arc<Self>) {
        for m in HW {
            let weak: Weak<Bridge> = Arc::downgrade(self);
            let points = m.points;
            let observe = move |o: &dyn AsyncInstrument<f64>| {
                let Some(b) = weak.upgrade() else { return };
                let rendering = b.snapshot();
                for c in rendering.view.npu.state.chips.values() {
                    for (a, v) in points(c) {
                        o.observe(v, &a);
                    }
                }
            };
            match m.kind {
                Kind::Counter => {
                    self.meter
                        .f64_observable_counter(m.name)
                        .with_unit(m.unit)
                        .with_callback(observe)
                        .build();
                }
                Kind::UpDown => {
                    self.meter
                        .f64_observable_up_down_counter(m.name)
                        .with_unit(m.unit)
                        .with_callback(observe)
                        .build();
                }
                Kind::Gauge => {
                    self.meter
                        .f64_observable_gauge(m.name)
                        .with_unit(m.unit)
                        .with_callback(observe)
                        .build();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::prometheus;
    use crate::snapshot::npu::NpuSnapshot;
    use crate::snapshot::status::BuildInfo;

    const TEMPERATURE: &str = "hcclwatch_npu_temperature_celsius";

    fn bridge(store: &Arc<Store>, interval: Duration) -> (Arc<Bridge>, Arc<Collections>) {
        let collections = Arc::new(Collections::default());
        let sources = Sources {
            store: store.clone(),
            collectors: prometheus::collectors(&BuildInfo::current()),
            collections: collections.clone(),
            interval,
        };
        let meter = opentelemetry::global::meter("hcclwatch-test");
        (Bridge::new(sources, meter), collections)
    }

    /// Every callback of one collection (families and `hw.*` alike) reads the same view,
    /// even when a part is published mid-collection; the next collection reads afresh.
    #[test]
    fn the_callbacks_of_one_collection_share_one_view() {
        let store = crate::snapshot::fixture::store(2);
        let (b, collections) = bridge(&store, Duration::from_secs(3600));
        let first = b.snapshot();
        assert!(first.families.contains_key(TEMPERATURE));
        store.publish_npu(NpuSnapshot::default());
        let later = b.snapshot();
        assert!(Arc::ptr_eq(&first, &later), "one collection rendered twice");
        assert_eq!(later.view.npu.state.chips.len(), 2);
        collections.finish();
        let next = b.snapshot();
        assert!(!next.families.contains_key(TEMPERATURE));
        assert!(next.view.npu.state.chips.is_empty());
    }

    /// A collection whose export the SDK skipped does not lend its rendering to the next
    /// one: it serves for half an interval at most.
    #[test]
    fn a_rendering_serves_half_an_interval_at_most() {
        let store = crate::snapshot::fixture::store(2);
        let (b, _) = bridge(&store, Duration::ZERO);
        let first = b.snapshot();
        store.publish_npu(NpuSnapshot::default());
        let next = b.snapshot();
        assert!(!Arc::ptr_eq(&first, &next));
        assert!(!next.families.contains_key(TEMPERATURE));
    }
}
