//! Embeds the git commit and build date for `hcclwatch version` and `hcclwatch_build_info`,
//! and generates the kubelet pod-resources gRPC client and server from `proto/` with the
//! pure-Rust `protox` compiler, so no `protoc` binary is needed to build.

use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn build_info() {
    let commit =
        run("git", &["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let date = run("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=BUILD_INFO_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=BUILD_INFO_DATE={date}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
}

/// The pod-resources API (`v1.PodResourcesLister`). The server is generated too: the
/// tests stand in for the kubelet with it, speaking the same protocol from the same code.
fn pod_resources() -> Result<(), Box<dyn std::error::Error>> {
    const PROTO: &str = "proto/podresources/v1/api.proto";
    println!("cargo:rerun-if-changed={PROTO}");
    let fds = protox::compile([PROTO], ["proto/podresources"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .compile_fds(fds)?;
    Ok(())
}

fn main() {
    build_info();
    if let Err(e) = pod_resources() {
        // A broken .proto is a build error with the compiler's message, not a panic trace.
        eprintln!("generating the pod-resources API from proto/: {e}");
        std::process::exit(1);
    }
}
