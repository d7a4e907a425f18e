//! The NPU readings under the OpenTelemetry hardware semantic conventions (`hw.*`), read
//! from the typed chips. The conventions have no NPU device type, so an NPU is a
//! `hw.type = "gpu"` device there; its sensors are children of it (`hw.parent`).

use opentelemetry::KeyValue;

use crate::snapshot::npu::{ChipReadings, UtilUnit};

/// A `hw.*` point: attributes and value.
pub type Point = (Vec<KeyValue>, f64);

/// How an instrument of the conventions is exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An observable gauge.
    Gauge,
    /// An observable monotonic sum.
    Counter,
    /// An observable up-down sum (`hw.status`: one point per state, 1 for the current).
    UpDown,
}

/// One `hw.*` instrument and how to read it from a chip.
pub struct HwMetric {
    /// The OpenTelemetry name.
    pub name: &'static str,
    /// UCUM unit.
    pub unit: &'static str,
    /// Instrument kind.
    pub kind: Kind,
    /// The points of one chip (none when the chip lacks the reading).
    pub points: fn(&ChipReadings) -> Vec<Point>,
}

fn device(c: &ChipReadings) -> Vec<KeyValue> {
    let mut v = vec![
        KeyValue::new("hw.id", format!("npu{}", c.address.phy)),
        KeyValue::new("hw.type", "gpu"),
        KeyValue::new("hw.vendor", "Huawei"),
    ];
    if let Some(m) = &c.identity.model {
        v.push(KeyValue::new("hw.model", m.clone()));
    }
    v
}

fn sensor(c: &ChipReadings, what: &str, kind: &'static str) -> Vec<KeyValue> {
    let npu = c.address.phy;
    vec![
        KeyValue::new("hw.id", format!("npu{npu}-{what}")),
        KeyValue::new("hw.type", kind),
        KeyValue::new("hw.parent", format!("npu{npu}")),
        KeyValue::new("hw.name", format!("NPU {npu} {what}")),
    ]
}

fn temperatures(c: &ChipReadings) -> Vec<Point> {
    let die = c
        .temperature_celsius
        .map(|t| (sensor(c, "die", "temperature"), t));
    let hbm = c
        .hbm
        .map(|h| (sensor(c, "hbm", "temperature"), h.temperature_celsius));
    die.into_iter().chain(hbm).collect()
}

fn status(c: &ChipReadings) -> Vec<Point> {
    // DCMI health 0 ok, 1–2 degraded (minor, major), 3 failed.
    let Some(h) = c.health else {
        return Vec::new();
    };
    let state = match h {
        0 => "ok",
        1 | 2 => "degraded",
        _ => "failed",
    };
    ["ok", "degraded", "failed"]
        .iter()
        .map(|s| {
            let mut a = device(c);
            a.push(KeyValue::new("hw.state", *s));
            (a, if *s == state { 1.0 } else { 0.0 })
        })
        .collect()
}

fn errors(c: &ChipReadings) -> Vec<Point> {
    let Some(e) = c.ecc else {
        return Vec::new();
    };
    [
        ("hbm_ecc_corrected", e.total_single),
        ("hbm_ecc_uncorrectable", e.total_double),
    ]
    .into_iter()
    .map(|(t, n)| {
        let mut a = device(c);
        a.push(KeyValue::new("error.type", t));
        (a, n as f64)
    })
    .collect()
}

fn utilization(c: &ChipReadings) -> Vec<Point> {
    c.utilization
        .iter()
        .map(|(u, r)| {
            let task = match u {
                UtilUnit::Overall => "general",
                other => other.as_str(),
            };
            let mut a = device(c);
            a.push(KeyValue::new("hw.gpu.task", task));
            (a, *r)
        })
        .collect()
}

/// Every `hw.*` instrument hcclwatch exports.
pub const HW: &[HwMetric] = &[
    HwMetric {
        name: "hw.temperature",
        unit: "Cel",
        kind: Kind::Gauge,
        points: temperatures,
    },
    HwMetric {
        name: "hw.power",
        unit: "W",
        kind: Kind::Gauge,
        points: |c| c.power_watts.map(|p| (device(c), p)).into_iter().collect(),
    },
    HwMetric {
        name: "hw.voltage",
        unit: "V",
        kind: Kind::Gauge,
        points: |c| {
            c.voltage_volts
                .map(|v| (sensor(c, "core", "voltage"), v))
                .into_iter()
                .collect()
        },
    },
    HwMetric {
        name: "hw.status",
        unit: "1",
        kind: Kind::UpDown,
        points: status,
    },
    HwMetric {
        name: "hw.errors",
        unit: "{error}",
        kind: Kind::Counter,
        points: errors,
    },
    HwMetric {
        name: "hw.gpu.memory.usage",
        unit: "By",
        kind: Kind::Gauge,
        points: |c| {
            c.hbm
                .map(|h| (device(c), h.used_bytes as f64))
                .into_iter()
                .collect()
        },
    },
    HwMetric {
        name: "hw.gpu.memory.limit",
        unit: "By",
        kind: Kind::Gauge,
        points: |c| {
            c.hbm
                .map(|h| (device(c), h.total_bytes as f64))
                .into_iter()
                .collect()
        },
    },
    HwMetric {
        name: "hw.gpu.utilization",
        unit: "1",
        kind: Kind::Gauge,
        points: utilization,
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::fixture;

    fn attr(p: &Point, k: &str) -> String {
        p.0.iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn readings_map_to_the_conventions() {
        // Fixture chip 1: 41 °C die, 41 °C HBM, 201 W, health ok, 3 corrected ECC errors.
        let c = fixture::chip(1);
        let temps = temperatures(&c);
        assert_eq!(temps.len(), 2);
        assert_eq!(attr(&temps[0], "hw.id"), "npu1-die");
        assert_eq!(temps[0].1, 41.0);
        assert_eq!(attr(&temps[1], "hw.parent"), "npu1");
        let st = status(&c);
        let ok = st.iter().find(|p| attr(p, "hw.state") == "ok").unwrap();
        assert_eq!(ok.1, 1.0);
        assert_eq!(st.iter().map(|p| p.1).sum::<f64>(), 1.0);
        let e = errors(&c);
        assert_eq!(e[0].1, 3.0);
        assert_eq!(attr(&e[0], "error.type"), "hbm_ecc_corrected");
        let u = utilization(&c);
        assert!(
            u.iter()
                .any(|p| attr(p, "hw.gpu.task") == "general" && p.1 == 0.5)
        );
        // A missing reading has no point.
        let mut bare = fixture::chip(2);
        bare.health = None;
        bare.ecc = None;
        assert!(status(&bare).is_empty() && errors(&bare).is_empty());
    }
}
