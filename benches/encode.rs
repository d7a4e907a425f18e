//! Cost of one scrape: encoding the snapshot of 16 NPUs with every collector populated
//! (identity, health, sensors, utilisation, HBM/ECC, port counters, 16 HCCS links, host).
//!
//! Run: `cargo bench --bench encode`. Numbers in docs/benchmarks.md ("The daemon").

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};
use hcclwatch::export::prometheus::{Format, encode, registry};
use hcclwatch::snapshot::Store;
use hcclwatch::snapshot::host::HostSnapshot;
use hcclwatch::snapshot::npu::{
    Ddr, Fault, FaultLevel, FaultState, Hccs, LevelSource, NpuSnapshot, Scope, Unsupported,
};
use hcclwatch::snapshot::status::{BuildInfo, CollectorStatus};
use hcclwatch::telemetry::host::HostSource;
use hcclwatch::telemetry::sim::SimSource;
use hcclwatch::telemetry::{DeviceSource, Group, NpuState, SourceStats};

fn populated_store() -> Arc<Store> {
    let mut sim = SimSource::new(16, 1);
    let mut state = NpuState::default();
    for g in Group::ALL {
        sim.collect(g, &mut state);
    }
    for c in state.chips.values_mut() {
        c.ddr = Some(Ddr {
            total_bytes: 32 << 30,
            used_bytes: 1 << 30,
        });
        c.faults = Some(vec![Fault {
            code: 0x8107_8603,
            level: FaultLevel::NotHandleFault,
            source: LevelSource::Table,
            description: Some("link down".into()),
            state: FaultState::Counted,
        }]);
        c.hccs = Hccs {
            tx_bytes_per_second: Some([Some(1.5e9); 16]),
            rx_bytes_per_second: Some([Some(1.25e9); 16]),
            tx_flits: Some([123_456; 16]),
            rx_flits: Some([654_321; 16]),
            crc_errors: Some([0; 16]),
        };
    }
    let mut collectors = BTreeMap::new();
    for name in [
        "dcmi",
        "npu_inventory",
        "npu_health",
        "npu_sensors",
        "npu_utilization",
        "npu_memory",
        "npu_network",
    ] {
        collectors.insert(
            name.to_string(),
            CollectorStatus {
                name: name.to_string(),
                success: true,
                duration: Duration::from_millis(3),
                last_success: Some(SystemTime::now()),
            },
        );
    }
    let mut stats = SourceStats::default();
    stats
        .call_errors
        .insert(("dcmi_get_device_temperature".into(), "-8005".into()), 3);
    stats
        .timeouts
        .insert("dcmi_get_device_network_health".into(), 1);
    stats.unsupported.insert(Unsupported {
        call: "dcmi_get_device_memory_info_v3".into(),
        scope: Scope::Chip(0),
        reason: "not_supported",
    });
    let store = Arc::new(Store::new(true, true));
    store.publish_npu(NpuSnapshot {
        backend: Some("dcmi"),
        backend_up: true,
        state,
        collectors,
        stats,
        expected_npus: 0,
    });
    let mut host = HostSource::new();
    let _ = host.collect();
    store.publish_host(HostSnapshot {
        readings: host.collect(),
        collector: Some(CollectorStatus {
            name: "host".into(),
            success: true,
            duration: Duration::from_millis(1),
            last_success: Some(SystemTime::now()),
        }),
    });
    store
}

fn bench_encode(c: &mut Criterion) {
    let reg = registry(populated_store(), BuildInfo::current());
    let bytes = encode(&reg, Format::Text004).unwrap().len();
    let series = encode(&reg, Format::Text004)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .count();
    eprintln!("scrape of 16 NPUs: {series} series, {bytes} bytes (0.0.4)");
    let mut g = c.benchmark_group("scrape_16_npus");
    g.bench_function("prometheus_text_0.0.4", |b| {
        b.iter(|| black_box(encode(&reg, Format::Text004).unwrap()))
    });
    g.bench_function("openmetrics_1.0", |b| {
        b.iter(|| black_box(encode(&reg, Format::OpenMetrics).unwrap()))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    targets = bench_encode
}
criterion_main!(benches);
