//! `--web.config.file` in the Prometheus exporter-toolkit format (issue 18): TLS with
//! rustls, certificate reload, a client CA, and basic auth with bcrypt hashes, checked
//! with curl and with Debian's Prometheus scraping over TLS with basic auth. The
//! certificates are made here with rcgen.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, KillOnDrop, Start, free_port};

struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

fn pki(dir: &Path) -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "hcclwatch test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf = |name: &str, sans: Vec<String>| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        let cert = p.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (cert, key) = leaf("localhost", vec!["localhost".into(), "127.0.0.1".into()]);
    let (ccert, ckey) = leaf("prometheus", vec!["prometheus.example".into()]);
    let w = |n: &str, t: &str| {
        let p = dir.join(n);
        std::fs::write(&p, t).unwrap();
        p
    };
    Pki {
        ca: w("ca.crt", &ca_cert.pem()),
        cert: w("server.crt", &cert),
        key: w("server.key", &key),
        client_cert: w("client.crt", &ccert),
        client_key: w("client.key", &ckey),
        issuer,
    }
}

fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl (scripts/test.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "000"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn daemon(dir: &Path, web: &str) -> Daemon {
    let web_path = dir.join("web.yml");
    std::fs::write(&web_path, web).unwrap();
    let cfg = format!(
        "[web]\nlisten_address = \"127.0.0.1:0\"\nconfig_file = \"{}\"\n[telemetry]\nbackend = \"none\"\n",
        web_path.display()
    );
    Daemon::start(Start::new(&cfg))
}

/// Pins: with a web config, /metrics and /api/v1/state need TLS and the bcrypt user;
/// health checks stay open; certificates are reloaded when their files change.
#[test]
fn tls_and_basic_auth_with_curl_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let d = daemon(
        dir.path(),
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prom: {hash}\nhttp_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
        ),
    );
    let url = |path: &str| format!("https://{}{path}", d.addr);
    let ca = p.ca.to_str().unwrap();
    let (code, body) = curl(&["--cacert", ca, "-u", "prom:s3cret", &url("/metrics")]);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("hcclwatch_build_info"), "{body}");
    assert_eq!(
        curl(&["--cacert", ca, "-u", "prom:wrong", &url("/metrics")]).0,
        401
    );
    assert_eq!(curl(&["--cacert", ca, &url("/metrics")]).0, 401);
    assert_eq!(curl(&["--cacert", ca, &url("/api/v1/state")]).0, 401);
    assert_eq!(curl(&["--cacert", ca, &url("/-/healthy")]).0, 200);
    // Plain HTTP on the TLS port gets no answer.
    let (code, _) = curl(&[&format!("http://{}/metrics", d.addr)]);
    assert_ne!(code, 200);
    // HTTP/2 is not offered unless configured.
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version}",
            "--http2",
            "--cacert",
            ca,
            "-u",
            "prom:s3cret",
            &url("/metrics"),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1.1");

    // Reload: a new certificate for another name replaces the old one on disk.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["reloaded.example".to_string()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "reloaded");
    let cert = params.signed_by(&key, &p.issuer).unwrap();
    std::fs::write(&p.key, key.serialize_pem()).unwrap();
    std::fs::write(&p.cert, cert.pem()).unwrap();
    let port = d.addr.rsplit_once(':').unwrap().1.to_string();
    let resolve = format!("reloaded.example:{port}:127.0.0.1");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _) = curl(&[
            "--cacert",
            ca,
            "--resolve",
            &resolve,
            "-u",
            "prom:s3cret",
            &format!("https://reloaded.example:{port}/metrics"),
        ]);
        if code == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was not picked up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Pins: with RequireAndVerifyClientCert only a client certificate from the client CA
/// gets in (mutual TLS).
#[test]
fn mutual_tls_requires_a_client_certificate_from_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let d = daemon(
        dir.path(),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  client_allowed_sans: [prometheus.example]\n",
    );
    let url = format!("https://{}/metrics", d.addr);
    let ca = p.ca.to_str().unwrap();
    assert_ne!(
        curl(&["--cacert", ca, &url]).0,
        200,
        "no client certificate"
    );
    let (code, body) = curl(&[
        "--cacert",
        ca,
        "--cert",
        p.client_cert.to_str().unwrap(),
        "--key",
        p.client_key.to_str().unwrap(),
        &url,
    ]);
    assert_eq!(code, 200, "{body}");
    // A certificate the CA did not sign is refused.
    let other = rcgen::generate_simple_self_signed(vec!["prometheus.example".to_string()]).unwrap();
    let oc = dir.path().join("other.crt");
    let ok = dir.path().join("other.key");
    std::fs::write(&oc, other.cert.pem()).unwrap();
    std::fs::write(&ok, other.signing_key.serialize_pem()).unwrap();
    let (code, _) = curl(&[
        "--cacert",
        ca,
        "--cert",
        oc.to_str().unwrap(),
        "--key",
        ok.to_str().unwrap(),
        &url,
    ]);
    assert_ne!(code, 200);
}

/// Pins: Debian's Prometheus scrapes the daemon over TLS with basic auth
/// (`scheme: https`, `tls_config.ca_file`, `basic_auth`) and the target is up.
#[test]
fn prometheus_scrapes_over_tls_with_basic_auth() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let hash = bcrypt::hash("scrape-pass", 4).unwrap();
    let d = daemon(
        dir.path(),
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prometheus: {hash}\n"
        ),
    );
    let port = d.addr.rsplit_once(':').unwrap().1;
    let prom_cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &prom_cfg,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: hcclwatch\n    scheme: https\n    tls_config:\n      ca_file: {ca}\n    basic_auth:\n      username: prometheus\n      password: scrape-pass\n    static_configs:\n      - targets: ['localhost:{port}']\n",
            ca = p.ca.display()
        ),
    )
    .unwrap();
    let prom_port = free_port();
    let prom_addr = format!("127.0.0.1:{prom_port}");
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", prom_cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={prom_addr}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus (scripts/test.sh installs it)");
    let _prom = KillOnDrop(Some(child));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if std::net::TcpStream::connect(&prom_addr).is_ok() {
            let r = common::http_get(
                &prom_addr,
                &format!(
                    "/api/v1/query?query={}",
                    common::url_encode("up{job=\"hcclwatch\"}")
                ),
                None,
            );
            if r.body.contains("\"value\":[") && r.body.contains(",\"1\"]") {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never saw the target up over TLS with basic auth"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}
