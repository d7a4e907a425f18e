//! The push's verdicts, its state machine, and its client against a TLS server.

use super::*;
use crate::snapshot::npu::{Fault, FaultState, LevelSource, NpuState};
use crate::snapshot::probe::MemberView;

fn npu(edit: impl Fn(&mut ChipReadings)) -> NpuSnapshot {
    let mut chip = ChipReadings {
        health: Some(0),
        up: Some(true),
        ..ChipReadings::default()
    };
    edit(&mut chip);
    NpuSnapshot {
        state: NpuState {
            chips: [(4, chip)].into_iter().collect(),
            ..NpuState::default()
        },
        ..NpuSnapshot::default()
    }
}

fn fault(code: u32, level: FaultLevel, state: FaultState) -> Fault {
    Fault {
        code,
        level,
        source: LevelSource::Table,
        description: None,
        state,
    }
}

/// Pins: with `hard_npu_scoped`, a chip's own fault is that NPU's verdict (with its
/// reason) and not the node's; a lost card stays the node's; without it, the node's.
#[test]
fn npu_scoped_faults_are_pushed_as_the_npus() {
    let code = npu(|c| {
        c.faults = Some(vec![fault(
            0x80E3_A201,
            FaultLevel::SeparateNPU,
            FaultState::Counted,
        )]);
    });
    let scoped = verdicts(&code, None, "n6", 3, true, &|_| false);
    assert_eq!(scoped.len(), 1, "{scoped:?}");
    let (reason, why) = &scoped[&Some(4)];
    assert_eq!(*reason, "separate_npu_fault");
    assert!(why.contains("NPU 4 fault code"), "{why}");
    let node = verdicts(&code, None, "n6", 3, false, &|_| false);
    // An NPU an operator holds healthy is pushed in neither form.
    assert!(verdicts(&code, None, "n6", 3, false, &|id| id == 4).is_empty());
    assert!(verdicts(&code, None, "n6", 3, true, &|id| id == 4).is_empty());
    assert_eq!(node.keys().collect::<Vec<_>>(), [&None]);
    let lost = verdicts(&npu(|c| c.dropped = true), None, "n6", 3, true, &|_| false);
    assert_eq!(lost[&None].0, "hard_fault");
    assert_eq!(lost.len(), 1);
    assert_ne!(npu_fingerprint("n6", 4), fingerprint("n6"));
    assert_ne!(npu_fingerprint("n6", 4), npu_fingerprint("n6", 5));
}

#[test]
fn the_hard_faults_that_are_pushed_and_those_that_are_not() {
    let none = judge(&npu(|_| {}), None, "n6", 3);
    assert_eq!(none, None);
    let lost = judge(&npu(|c| c.dropped = true), None, "n6", 3).unwrap();
    assert!(lost.contains("NPU 4 lost"), "{lost}");
    // Critical health counts after the configured reads in a row, not before.
    let two = npu(|c| {
        c.health = Some(3);
        c.critical_reads = 2;
    });
    assert_eq!(judge(&two, None, "n6", 3), None);
    let three = npu(|c| {
        c.health = Some(3);
        c.critical_reads = 3;
    });
    assert!(
        judge(&three, None, "n6", 3)
            .unwrap()
            .contains("health critical for 3 reads")
    );
    // A code at SeparateNPU or worse, in effect; not PreSeparateNPU, not one still pending.
    for (level, state, pushed) in [
        (FaultLevel::SeparateNPU, FaultState::Counted, true),
        (FaultLevel::ManuallySeparateNPU, FaultState::Held, true),
        (FaultLevel::PreSeparateNPU, FaultState::Counted, false),
        (FaultLevel::NotHandleFault, FaultState::Counted, false),
        (
            FaultLevel::SeparateNPU,
            FaultState::Pending {
                reads: 1,
                needed: 3,
            },
            false,
        ),
    ] {
        let s = npu(|c| c.faults = Some(vec![fault(0x80E3_A201, level, state)]));
        let got = judge(&s, None, "n6", 3);
        assert_eq!(got.is_some(), pushed, "{level:?} {state:?}: {got:?}");
        if pushed {
            assert!(got.unwrap().contains("0x80E3A201"));
        }
    }
    // The group's hard-fault verdict about this node (not about another, not a straggler).
    let mut probe = ProbeSnapshot::default();
    let mut me = MemberView::new("n6");
    me.quarantine = Some(QuarantineReason::HardFault);
    let mut other = MemberView::new("n7");
    other.quarantine = Some(QuarantineReason::HardFault);
    probe.members = vec![other.clone()];
    assert_eq!(judge(&npu(|_| {}), Some(&probe), "n6", 3), None);
    probe.members = vec![other, me.clone()];
    assert!(judge(&npu(|_| {}), Some(&probe), "n6", 3).is_some());
    me.quarantine = Some(QuarantineReason::Straggler);
    probe.members = vec![me];
    assert_eq!(judge(&npu(|_| {}), Some(&probe), "n6", 3), None);
}

#[test]
fn a_verdict_fires_once_and_resolves_after_the_wait() {
    let wait = Duration::from_secs(10);
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let wall: Timestamp = "2026-12-02T10:00:00Z".parse().unwrap();
    let mut v = Verdict::new();
    // After a start: clear readings resolve a verdict that may be open, after the wait.
    assert!(v.step(None, at(0), wall, wait).is_none());
    let (st, onset, why) = v.step(None, at(10), wall, wait).unwrap();
    assert_eq!((st, onset), (Wire::Resolved, wall));
    assert!(why.contains("after a start"), "{why}");
    assert!(v.step(None, at(11), wall, wait).is_none());
    // A fault fires once, with its onset; repeats of it push nothing.
    let (st, onset, _) = v.step(Some("x".into()), at(20), wall, wait).unwrap();
    assert_eq!((st, onset), (Wire::Firing, wall));
    let later: Timestamp = "2026-12-02T10:01:00Z".parse().unwrap();
    assert!(v.step(Some("x".into()), at(21), later, wait).is_none());
    // Clear for less than the wait, then faulty again: still the same open verdict.
    assert!(v.step(None, at(22), later, wait).is_none());
    assert!(v.step(Some("x".into()), at(30), later, wait).is_none());
    assert!(v.step(None, at(31), later, wait).is_none());
    assert!(v.step(None, at(40), later, wait).is_none());
    let (st, onset, _) = v.step(None, at(41), later, wait).unwrap();
    assert_eq!((st, onset), (Wire::Resolved, wall), "the firing's onset");
}

#[test]
fn the_fingerprint_is_the_nodes() {
    let a = fingerprint("npu-node-6");
    assert_eq!(a.len(), 16);
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(a, fingerprint("npu-node-6"));
    assert_ne!(a, fingerprint("npu-node-7"));
}

/// A CA and a server certificate for `localhost` signed by it, as PEM.
fn pki() -> (String, rcgen::Certificate, rcgen::KeyPair) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca.pem(), cert, key)
}

/// A TLS server on loopback that answers one request 200 and returns what it read.
async fn one_shot_server(
    cert: &rcgen::Certificate,
    key: &rcgen::KeyPair,
) -> (u16, tokio::task::JoinHandle<String>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let Ok(mut s) = acceptor.accept(tcp).await else {
            return String::new();
        };
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        // Headers and the small body arrive together or in a few reads.
        while !String::from_utf8_lossy(&got).contains("\"summary\"") {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n")
            .await
            .unwrap();
        s.shutdown().await.ok();
        String::from_utf8_lossy(&got).into_owned()
    });
    (port, task)
}

fn push() -> Vec<u8> {
    serde_json::to_vec(&Push {
        version: VERSION.into(),
        node: "n6".into(),
        status: Wire::Firing,
        reason: "hard_fault".into(),
        onset: "2026-12-02T10:00:00Z".into(),
        fingerprint: fingerprint("n6"),
        summary: "s".into(),
        npu: None,
    })
    .unwrap()
}

#[tokio::test]
async fn the_client_trusts_the_configured_ca_and_only_it() {
    let (ca, cert, key) = pki();
    let (port, server) = one_shot_server(&cert, &key).await;
    let url = format!("https://localhost:{port}");
    let c = Client::new(
        &url,
        Some(("ca.pem", ca.as_bytes())),
        "tok-123".into(),
        Duration::from_secs(5),
    )
    .unwrap();
    let a = c.post(push()).await.unwrap();
    assert_eq!(a.status.as_u16(), 200);
    assert_eq!(a.text, "ok");
    let req = server.await.unwrap();
    assert!(req.starts_with("POST /v1/push HTTP/1.1"), "{req}");
    assert!(req.contains("authorization: Bearer tok-123"), "{req}");
    // Another CA: the handshake fails, nothing is sent.
    let (other_ca, _, _) = pki();
    let (port, server) = one_shot_server(&cert, &key).await;
    let c = Client::new(
        &format!("https://localhost:{port}"),
        Some(("other.pem", other_ca.as_bytes())),
        "tok-123".into(),
        Duration::from_secs(5),
    )
    .unwrap();
    let e = c.post(push()).await.unwrap_err().to_string();
    assert!(e.starts_with("TLS:"), "{e}");
    assert_eq!(server.await.unwrap(), "");
}

#[test]
fn client_settings_are_checked() {
    let t = Duration::from_secs(1);
    let e = Client::new("https://r:9479", None, "t".into(), t)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("ca_file is not set"), "{e}");
    let e = Client::new("ftp://r", None, "t".into(), t)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("scheme must be https"), "{e}");
    let e = Client::new(
        "https://r",
        Some(("ca.pem", b"nothing".as_slice())),
        "t".into(),
        t,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("ca.pem") && e.contains("no certificate"), "{e}");
    let c = Client::new("http://127.0.0.1:9479/ignored", None, "t".into(), t).unwrap();
    assert_eq!(c.uri().to_string(), "http://127.0.0.1:9479/v1/push");
}
