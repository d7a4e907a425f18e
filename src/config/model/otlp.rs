//! `[otlp]`: OpenTelemetry export over OTLP/HTTP.

use std::time::Duration;

use super::section;
use crate::config::duration;
use crate::config::enums::config_enum;
use crate::config::schema::{Spec, ms, secs};
use crate::config::types::{OtlpHeader, parse};

config_enum! {
    /// The OTLP wire protocol; only one is built.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum OtlpProtocol {
        /// Protobuf over HTTP.
        #[default]
        HttpProtobuf = "http/protobuf",
    }
}

config_enum! {
    /// Compression of OTLP request bodies.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum Compression {
        /// None, unless `OTEL_EXPORTER_OTLP_COMPRESSION` says otherwise.
        #[default]
        None = "none",
        /// gzip.
        Gzip = "gzip",
    }
}

section! {
    /// `[otlp]`: push every metric (and optionally probe-round traces) over OTLP/HTTP.
    ///
    /// The standard `OTEL_EXPORTER_OTLP_*` variables apply where a key here is left at its
    /// default; a key set here wins.
    pub struct OtlpConfig in "otlp" {
        /// Base URL of the OTLP/HTTP receiver (`/v1/metrics`, `/v1/traces` are appended);
        /// empty: `OTEL_EXPORTER_OTLP_ENDPOINT`, and without either, no export.
        endpoint: String = String::new(), Spec::STR;
        /// Wire protocol; only `http/protobuf` is built.
        protocol: OtlpProtocol = OtlpProtocol::HttpProtobuf,
            Spec::one_of(OtlpProtocol::NAMES);
        /// Time between metric exports.
        #[serde(with = "duration::serde_str")]
        interval: Duration = secs(60), Spec::duration(ms(500), ms(3_600_000));
        /// Extra request headers as `name=value`.
        headers: Vec<OtlpHeader> = Vec::new(), Spec::NAME_LIST.parsed(parse::otlp_headers);
        /// Bound on one export request.
        #[serde(with = "duration::serde_str")]
        timeout: Duration = secs(10), Spec::duration(ms(100), ms(300_000));
        /// `none` (or what `OTEL_EXPORTER_OTLP_COMPRESSION` says) or `gzip`.
        compression: Compression = Compression::None, Spec::one_of(Compression::NAMES);
        /// Export a span per probe round, with a child span per collective.
        traces: bool = false, Spec::BOOL;
        /// How long the final flush may take at shutdown.
        #[serde(with = "duration::serde_str")]
        shutdown_timeout: Duration = secs(5), Spec::duration(ms(100), ms(60_000));
    }
}
