//! `[web]`: the daemon's HTTP server.

use std::path::PathBuf;
use std::time::Duration;

use super::section;
use crate::config::duration;
use crate::config::schema::{Spec, ms, secs};
use crate::config::types::{ListenAddr, parse};

section! {
    /// `[web]`: where `/metrics` is served.
    pub struct WebConfig in "web" {
        /// `host:port`, `[v6]:port` or `:port` (all interfaces).
        listen_address: ListenAddr = ListenAddr::all_interfaces(9478),
            Spec::STR.parsed(parse::text::<ListenAddr>);
        /// Path of the metrics endpoint.
        telemetry_path: String = "/metrics".into(), Spec::STR;
        /// A Prometheus exporter-toolkit web config file (TLS, client CA, basic-auth users).
        #[serde(skip_serializing_if = "Option::is_none")]
        config_file: Option<PathBuf> = None, Spec::PATH;
        /// Open connections at most; at the cap the connection idle longest is closed.
        max_connections: u32 = 4096, Spec::int(16, 1_000_000);
        /// Time a client has to send a request's head, counted from the connection's start
        /// or the end of the previous response (so it also ends idle keep-alive
        /// connections).
        #[serde(with = "duration::serde_str")]
        header_read_timeout: Duration = secs(10), Spec::duration(ms(100), ms(300_000));
        /// A connection that moves no byte in either direction for this long is closed.
        #[serde(with = "duration::serde_str")]
        idle_timeout: Duration = secs(30), Spec::duration(ms(100), ms(3_600_000));
        /// Largest request head (request line and headers), in bytes.
        max_header_bytes: u32 = 16 << 10, Spec::int(8192, 1 << 20);
        /// Also put `namespace`, `pod` and `container` on every per-NPU series (as
        /// dcgm-exporter does), for an NPU that exactly one pod uses.
        pod_labels: bool = false, Spec::BOOL;
    }
}

/// Paths the daemon's server routes itself; `web.telemetry_path` must be none of them
/// (`export::server` checks that it routes exactly these).
pub const RESERVED_PATHS: &[&str] = &["/", "/-/healthy", "/-/ready", "/api/v1/state"];
