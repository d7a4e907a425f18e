//! Observable instruments over the typed snapshot.
//!
//! The SDK's periodic reader calls every instrument's callback once per collection. The
//! callbacks of one collection share one rendering of the collectors (cached briefly), so
//! a collection renders the snapshot once, not once per family. Families appear as the
//! daemon gets going (probing starts, a collector's first reading), so [`Bridge::discover`]
//! registers an instrument for each new family; the `hw.*` instruments read the chips
//! directly and are registered once.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter};

use super::families::{Collected, Families, ucum};
use super::hw::{HW, Kind};
use crate::export::prometheus::family::Render;
use crate::snapshot::Store;

/// A rendering is reused by every callback of one collection for this long.
const SNAPSHOT_TTL: Duration = Duration::from_millis(250);

/// The collectors, their last rendering, and the instruments registered so far.
pub struct Bridge {
    store: Arc<Store>,
    collectors: Vec<Box<dyn Render>>,
    cache: Mutex<Option<(Instant, Arc<Families>)>>,
    known: Mutex<BTreeSet<String>>,
    meter: Meter,
}

fn attrs(a: &[(String, String)]) -> Vec<KeyValue> {
    a.iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect()
}

impl Bridge {
    /// A bridge rendering `collectors` over `store` into instruments of `meter`.
    pub fn new(store: Arc<Store>, collectors: Vec<Box<dyn Render>>, meter: Meter) -> Arc<Self> {
        Arc::new(Self {
            store,
            collectors,
            cache: Mutex::new(None),
            known: Mutex::new(BTreeSet::new()),
            meter,
        })
    }

    fn snapshot(&self) -> Arc<Families> {
        self.render(false)
    }

    /// The collectors' families: the cached rendering if it is fresh and `force` is false.
    fn render(&self, force: bool) -> Arc<Families> {
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, s)) = c.as_ref()
            && at.elapsed() < SNAPSHOT_TTL
            && !force
        {
            return s.clone();
        }
        let mut out = Collected::default();
        for r in &self.collectors {
            // A collector that fails mid-way keeps what it wrote; the rest still render.
            let _ = r.render(&mut out);
        }
        let s = Arc::new(out.0);
        *c = Some((Instant::now(), s.clone()));
        s
    }

    /// Registers an observable instrument for every family not seen before.
    pub fn discover(self: &Arc<Self>) {
        // Always a fresh rendering: a cached one from just before a family appeared would
        // hide it (at shutdown, for good).
        let snap = self.render(true);
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        for (name, fam) in snap.iter() {
            if !known.insert(name.clone()) {
                continue;
            }
            let weak: Weak<Bridge> = Arc::downgrade(self);
            let key = name.clone();
            let observe = move |o: &dyn AsyncInstrument<f64>| {
                let Some(b) = weak.upgrade() else { return };
                if let Some(f) = b.snapshot().get(&key) {
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
                let npu = b.store.npu();
                for c in npu.state.chips.values() {
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
