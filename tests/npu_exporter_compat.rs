//! `compat.npu_exporter` and `web.node_label` end to end: a daemon reads two NPUs from
//! `libfake_dcmi.so` and their ports from the fake `hccn_tool`, with the compatibility
//! switched on by its flag (`--compat.npu-exporter`) and the node label set by its
//! environment variable (as the chart sets it from the downward API). Debian's Prometheus
//! scrapes it, and the queries HAMi-WebUI makes against npu-exporter (its exporter and
//! Ascend provider, `Project-HAMi/HAMi-WebUI` commit
//! `8f42445d325736655d467842cb762b75f2612d25`) and selections by the labels npu-exporter's
//! metric tables document (npu-exporter's docs have no PromQL of their own) each return
//! the expected series. Every expected value is computed here from what the fakes were
//! given, in DCMI's and `hccn_tool`'s own units, by npu-exporter's conversions.
//!
//! The exposition with both options off is `tests/golden.rs`'s, unchanged.

mod common;

use std::time::{Duration, Instant};

use common::{Daemon, FakeHccn, Start, fake_lib, free_port, http_get, url_encode};
use serde_json::{Value, json};

const NODE: &str = "npu-node-a";

/// What each fake chip reports, in DCMI's units.
struct Chip {
    phy: u32,
    bus: u32,
    vdie: [u32; 5],
    health: u32,
    temperature_c: i32,
    power_dw: u32,
    voltage_cv: u32,
    aicore_mhz: u32,
    aicore_pct: u32,
    hbm_pct: u32,
    hbm_total_mb: u64,
    hbm_used_mb: u64,
    hbm_temp_c: i32,
    hbm_bw_pct: u32,
    /// `hccn_tool -speed -g`, Mb/s.
    speed_mbps: u64,
}

const CHIPS: [Chip; 2] = [
    Chip {
        phy: 0,
        bus: 0x61,
        vdie: [
            0x1850_11D4,
            0x2110_4518,
            0xA0C4_ED94,
            0x14CC_040A,
            0x5610_2003,
        ],
        health: 0,
        temperature_c: 45,
        power_dw: 2150,
        voltage_cv: 85,
        aicore_mhz: 1800,
        aicore_pct: 37,
        hbm_pct: 12,
        hbm_total_mb: 65536,
        hbm_used_mb: 1024,
        hbm_temp_c: 40,
        hbm_bw_pct: 5,
        speed_mbps: 200_000,
    },
    Chip {
        phy: 1,
        bus: 0x62,
        vdie: [7, 0xABCD, 3, 4, 0xFFFF_FFFF],
        // A major alarm: npu-exporter's "unhealthy".
        health: 2,
        temperature_c: 52,
        power_dw: 3001,
        voltage_cv: 90,
        aicore_mhz: 1650,
        aicore_pct: 80,
        hbm_pct: 30,
        hbm_total_mb: 65536,
        hbm_used_mb: 20480,
        hbm_temp_c: 47,
        hbm_bw_pct: 9,
        speed_mbps: 100_000,
    },
];

const MODEL: &str = "910B3-Ascend-V1";

impl Chip {
    /// npu-exporter's `vdie_id`: each word as 8 hex digits, upper case, joined by `-`.
    fn vdie_id(&self) -> String {
        self.vdie
            .iter()
            .map(|w| format!("{w:08x}").to_uppercase())
            .collect::<Vec<_>>()
            .join("-")
    }

    fn pcie_bus_info(&self) -> String {
        format!("0000:{:02x}:00.0", self.bus)
    }

    fn dcmi(&self) -> Value {
        json!({
            "phy_id": self.phy, "logic_id": self.phy,
            "chip": {"type": "Ascend", "name": "910B3", "version": "V1", "aicore_count": 20},
            "pcie": {"domain": 0, "bus": self.bus, "device": 0, "function": 0},
            "vdie_id": self.vdie, "serial": format!("SN{}", self.phy),
            "health": self.health, "error_codes": [],
            "temperature_c": self.temperature_c, "power_dw": self.power_dw,
            "voltage_cv": self.voltage_cv, "aicore_mhz": self.aicore_mhz,
            "utilization": {"aicore": self.aicore_pct, "hbm": self.hbm_pct},
            "hbm": {"total_mb": self.hbm_total_mb, "used_mb": self.hbm_used_mb,
                    "temp_c": self.hbm_temp_c, "bandwidth_util": self.hbm_bw_pct},
            "network_health": 0
        })
    }

    fn hccn(&self) -> Value {
        json!({
            "phy_id": self.phy,
            "ips": [format!("10.20.0.{}", self.phy + 1)],
            "link": "UP",
            "speed_mbps": self.speed_mbps,
            "net_health": "Success"
        })
    }
}

fn config(hccn: &FakeHccn) -> String {
    format!(
        r#"
[web]
listen_address = "127.0.0.1:0"

[telemetry]
backend = "dcmi"
dcmi_library = "{lib}"
call_deadline = "500ms"
hccn_tool = "{tool}"
hccn_conf = "{conf}"

[telemetry.intervals]
inventory = "2s"
health = "300ms"
sensors = "300ms"
utilization = "300ms"
memory = "300ms"
network = "300ms"
ports = "1s"

[collectors]
host = false

[attribution]
enabled = false
"#,
        lib = fake_lib().display(),
        tool = hccn.tool.display(),
        conf = hccn.conf.display(),
    )
}

fn query(prom: &str, q: &str) -> Vec<Value> {
    let r = http_get(
        prom,
        &format!("/api/v1/query?query={}", url_encode(q)),
        None,
    );
    assert_eq!(r.status, 200, "{q}: {}", r.body);
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["status"], "success", "{q}: {v}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// The one sample's value of a query that must return exactly one series.
fn single(prom: &str, q: &str) -> (Value, f64) {
    let r = query(prom, q);
    assert_eq!(r.len(), 1, "{q} returned {r:?}");
    let v = r[0]["value"][1].as_str().unwrap().parse().unwrap();
    (r[0]["metric"].clone(), v)
}

fn assert_close(q: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{q}: got {got}, want {want}"
    );
}

#[test]
fn npu_exporter_queries_return_the_fake_readings_through_prometheus() {
    let dir = tempfile::tempdir().unwrap();
    let hccn = FakeHccn::new(
        dir.path(),
        &json!({"npus": CHIPS.iter().map(Chip::hccn).collect::<Vec<_>>()}).to_string(),
        None,
    );
    let scenario = json!({
        "dcmi_version": "24.1.rc2",
        "cards": [{"card_id": 0, "chips": CHIPS.iter().map(Chip::dcmi).collect::<Vec<_>>()}]
    })
    .to_string();
    let cfg = config(&hccn);
    let mut start = Start::new(&cfg).scenario(&scenario);
    start.args = vec!["--compat.npu-exporter"];
    start.env = vec![("HCCLWATCH_WEB_NODE_LABEL", NODE.to_string())];
    let daemon = Daemon::start(start);

    // Every family has its first reading: the ports' last.
    let text = daemon.wait_for("the link speed", Duration::from_secs(30), |s| {
        s.lines()
            .filter(|l| l.starts_with("npu_chip_link_speed{"))
            .count()
            == 2
            && s.contains("npu_chip_info_hbm_used_memory{")
    });

    // The node label: on every sample, once, with the configured name.
    let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(samples.len() > 50, "{text}");
    for line in &samples {
        assert_eq!(
            line.matches(&format!("node=\"{NODE}\"")).count(),
            1,
            "{line}"
        );
    }
    // No sentinel: npu-exporter's -1 never appears.
    for line in samples
        .iter()
        .filter(|l| l.starts_with("npu_") || l.starts_with("machine_"))
    {
        let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(v >= 0.0, "{line}");
    }

    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n\
             scrape_configs:\n  - job_name: npu-exporter\n    static_configs:\n      - targets: [\"{}\"]\n",
            daemon.addr
        ),
    )
    .unwrap();
    let prom = format!("127.0.0.1:{}", free_port());
    let _prometheus = common::start_prometheus(dir.path(), &prom);
    let deadline = Instant::now() + Duration::from_secs(60);
    while query(&prom, "npu_chip_link_speed").len() < 2 {
        assert!(
            Instant::now() < deadline,
            "Prometheus has no npu_chip_link_speed after 60 s; targets: {}",
            http_get(&prom, "/api/v1/targets", None).body
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    for c in &CHIPS {
        let vdie = c.vdie_id();
        // HAMi-WebUI's device queries (server/internal/exporter/exporter.go).
        let hami: [(&str, f64); 6] = [
            ("npu_chip_info_hbm_used_memory", c.hbm_used_mb as f64),
            ("npu_chip_info_hbm_total_memory", c.hbm_total_mb as f64),
            ("npu_chip_info_utilization", f64::from(c.aicore_pct)),
            ("npu_chip_info_temperature", f64::from(c.temperature_c)),
            // DCMI power is in 0.1 W.
            ("npu_chip_info_power", f64::from(c.power_dw) / 10.0),
            ("npu_chip_link_speed", c.speed_mbps as f64),
        ];
        for (metric, want) in hami {
            let q = format!("avg({metric}{{vdie_id=\"{vdie}\"}})");
            let (_, got) = single(&prom, &q);
            assert_close(&q, got, want);
        }
        // The device-info query reads the `id` label.
        let q = format!("npu_chip_info_power{{vdie_id=\"{vdie}\"}}");
        let (metric, _) = single(&prom, &q);
        assert_eq!(metric["id"], c.phy.to_string(), "{q}: {metric}");

        // Selection by every card label npu-exporter's metric tables document, in its
        // units: V, MHz, percent, °C.
        let sel = format!(
            "{{id=\"{}\",model_name=\"{MODEL}\",vdie_id=\"{vdie}\",pcie_bus_info=\"{}\"}}",
            c.phy,
            c.pcie_bus_info()
        );
        let documented: [(&str, f64); 8] = [
            ("npu_chip_info_voltage", f64::from(c.voltage_cv) / 100.0),
            ("npu_chip_info_aicore_current_freq", f64::from(c.aicore_mhz)),
            ("npu_chip_info_hbm_utilization", f64::from(c.hbm_pct)),
            ("npu_chip_info_hbm_temperature", f64::from(c.hbm_temp_c)),
            (
                "npu_chip_info_hbm_bandwidth_utilization",
                f64::from(c.hbm_bw_pct),
            ),
            (
                "npu_chip_info_health_status",
                if c.health == 0 { 1.0 } else { 0.0 },
            ),
            ("npu_chip_info_network_status", 1.0),
            ("npu_chip_info_link_status", 1.0),
        ];
        for (metric, want) in documented {
            let q = format!("{metric}{sel}");
            let (_, got) = single(&prom, &q);
            assert_close(&q, got, want);
        }
    }

    // HAMi-WebUI's Ascend provider lists a node's NPUs by the node label and reads `id`,
    // `vdie_id` and `model_name` (server/internal/provider/ascend/provider.go).
    let q = format!("npu_chip_info_health_status{{node=\"{NODE}\"}}");
    let mut listed: Vec<(String, String, String, f64)> = query(&prom, &q)
        .iter()
        .map(|s| {
            let m = &s["metric"];
            (
                m["id"].as_str().unwrap().to_string(),
                m["vdie_id"].as_str().unwrap().to_string(),
                m["model_name"].as_str().unwrap().to_string(),
                s["value"][1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    let want: Vec<(String, String, String, f64)> = CHIPS
        .iter()
        .map(|c| {
            (
                c.phy.to_string(),
                c.vdie_id(),
                MODEL.to_string(),
                if c.health == 0 { 1.0 } else { 0.0 },
            )
        })
        .collect();
    assert_eq!(listed, want, "{q}");

    // The machine counts.
    let healthy = CHIPS.iter().filter(|c| c.health == 0).count() as f64;
    for (q, want) in [
        ("machine_npu_nums", CHIPS.len() as f64),
        ("machine_healthy_npu_nums", healthy),
        ("machine_unhealthy_npu_nums", CHIPS.len() as f64 - healthy),
        ("machine_unknown_npu_nums", 0.0),
    ] {
        let (metric, got) = single(&prom, q);
        assert_close(q, got, want);
        assert_eq!(metric["node"], NODE, "{q}: {metric}");
    }
}
