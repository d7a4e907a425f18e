//! The OpenMetrics exposition parses with the reference OpenMetrics parser
//! (`prometheus_client.openmetrics.parser` from PyPI, which client_rust also checks
//! itself against). promtool only understands 0.0.4, so this covers the other format.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Daemon, Start, value};

const PARSER: &str = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
fams = list(text_string_to_metric_families(sys.stdin.read()))
samples = sum(len(f.samples) for f in fams)
types = {f.name: f.type for f in fams}
print(len(fams), samples, types.get("hcclwatch_npu_hbm_ecc_errors"), types.get("hcclwatch_npu_power_watts"))
"#;

fn parse(text: &str) -> Result<String, String> {
    let mut child = Command::new("python3")
        .args(["-c", PARSER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).to_string())
    }
}

#[test]
fn openmetrics_output_parses_with_the_reference_parser() {
    let scen = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fake-dcmi/scenarios/16-npu.json"
    ))
    .unwrap();
    let cfg = common::fake_config("");
    let d = Daemon::start(Start::new(&cfg).scenario(&scen));
    d.wait_for("the network collector", Duration::from_secs(20), |s| {
        value(
            s,
            "hcclwatch_scrape_collector_success",
            &[("collector", "npu_network")],
        ) == Some(1.0)
    });
    let om = d.get(
        "/metrics",
        Some("application/openmetrics-text; version=1.0.0"),
    );
    let summary =
        parse(&om.body).unwrap_or_else(|e| panic!("OpenMetrics parser rejected the output:\n{e}"));
    let parts: Vec<&str> = summary.split_whitespace().collect();
    assert_eq!(parts[2], "counter", "{summary}");
    assert_eq!(parts[3], "gauge", "{summary}");
    let samples: usize = parts[1].parse().unwrap();
    assert!(samples > 1000, "{summary}");
}

#[test]
fn the_reference_parser_rejects_broken_input() {
    // Without `# EOF` the exposition is invalid: the check can fail.
    assert!(parse("# TYPE a gauge\na 1\n").is_err());
}
