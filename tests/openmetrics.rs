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

/// The fake library's 16-NPU scenario.
fn sixteen_npus() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fake-dcmi/scenarios/16-npu.json"
    ))
    .unwrap()
}

#[test]
fn openmetrics_output_parses_with_the_reference_parser() {
    let scen = sixteen_npus();
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

/// Prometheus asks for gzip; the answer must say it is gzip and decompress to exactly the
/// exposition a plain scrape gets. curl is the client, with the header set by hand (not
/// `--compressed`), so the test sees the raw bytes on the wire. A collector may publish
/// between the two scrapes (values move), so the pair is taken again until it matches.
#[test]
fn a_gzip_scrape_is_the_plain_exposition_compressed() {
    use std::io::Read as _;

    let scen = sixteen_npus();
    let cfg = common::fake_config("");
    let d = Daemon::start(Start::new(&cfg).scenario(&scen));
    d.wait_for(
        "every collector's first pass",
        Duration::from_secs(20),
        |s| {
            ["npu_health", "npu_network", "host"].iter().all(|c| {
                value(s, "hcclwatch_scrape_collector_success", &[("collector", c)]).is_some()
            })
        },
    );
    let url = format!("http://{}/metrics", d.addr);
    let curl = |extra: &[&str]| {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", "-D", "/dev/stderr"])
            .args(extra)
            .arg(&url)
            .output()
            .expect("curl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stderr).to_lowercase(),
            out.stdout,
        )
    };
    let mut last = None;
    for _ in 0..20 {
        let (head, zipped) = curl(&["-H", "Accept-Encoding: gzip"]);
        assert!(head.contains("content-encoding: gzip"), "{head}");
        assert_eq!(&zipped[..2], &[0x1f, 0x8b], "not a gzip stream");
        let mut unzipped = String::new();
        flate2::read::GzDecoder::new(&zipped[..])
            .read_to_string(&mut unzipped)
            .expect("the gzip body decompresses");
        let (head, plain) = curl(&[]);
        assert!(!head.contains("content-encoding"), "{head}");
        let plain = String::from_utf8(plain).unwrap();
        assert!(plain.lines().count() > 100, "{plain}");
        assert!(
            zipped.len() * 4 < plain.len(),
            "gzip saved little: {} of {} bytes",
            zipped.len(),
            plain.len()
        );
        if unzipped == plain {
            return;
        }
        last = Some((unzipped, plain));
    }
    let (unzipped, plain) = last.unwrap();
    let differ: Vec<_> = unzipped
        .lines()
        .zip(plain.lines())
        .filter(|(a, b)| a != b)
        .take(5)
        .collect();
    panic!("20 gzip and plain scrapes in a row never matched; first differing lines: {differ:?}");
}
