//! Child spans of a probe round, one per collective, for OTLP traces (no-ops unless
//! `otlp.traces` installed a tracer).

use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue, global};

/// Starts the round's root span.
pub fn round(round: u64, peers: usize) -> Context {
    let span = global::tracer("hcclwatch.probe").start("probe.round");
    let cx = Context::current_with_span(span);
    cx.span().set_attributes([
        KeyValue::new("round", round as i64),
        KeyValue::new("peers", peers as i64),
    ]);
    cx
}

/// One collective of a probe round, as its span describes it.
#[derive(Debug, Clone, Copy)]
pub struct OpSpan<'a> {
    /// The span's name, e.g. `probe.all_reduce`.
    pub name: &'static str,
    /// The operation, e.g. `all_reduce`.
    pub op: &'static str,
    /// The algorithm that ran it (empty when there is none to name).
    pub algo: &'a str,
    /// Bytes the operation moved.
    pub bytes: usize,
    /// Ranks taking part.
    pub peers: usize,
    /// Bus bandwidth factor: 2(n − 1)/n for an all-reduce, as hccl_test and nccl-tests
    /// report it; 1 for point-to-point.
    pub bus_factor: f64,
}

/// Records one collective as a child of the round: op, algorithm, bytes, peers, and its
/// bus bandwidth (bytes ÷ seconds × `bus_factor`), from `start` for `seconds`.
pub fn op(cx: &Context, s: OpSpan<'_>, start: std::time::SystemTime, seconds: f64) {
    let OpSpan {
        name,
        op,
        algo,
        bytes,
        peers,
        bus_factor,
    } = s;
    let tracer = global::tracer("hcclwatch.probe");
    let mut span = tracer
        .span_builder(name)
        .with_start_time(start)
        .start_with_context(&tracer, cx);
    span.set_attributes([
        KeyValue::new("op", op),
        KeyValue::new("algorithm", algo.to_string()),
        KeyValue::new("bytes", bytes as i64),
        KeyValue::new("peers", peers as i64),
        KeyValue::new(
            "busbw",
            if seconds > 0.0 {
                bytes as f64 * bus_factor / seconds
            } else {
                0.0
            },
        ),
        KeyValue::new("result", "ok"),
    ]);
    span.end_with_timestamp(start + std::time::Duration::from_secs_f64(seconds.max(0.0)));
}

/// Ends the round's span with its result; a failure's message becomes the span status.
pub fn end<E: std::fmt::Display>(cx: &Context, result: Result<(), E>) {
    let span = cx.span();
    match result {
        Ok(()) => span.set_attribute(KeyValue::new("result", "ok")),
        Err(e) => {
            span.set_attribute(KeyValue::new("result", "failed"));
            span.set_status(opentelemetry::trace::Status::error(e.to_string()));
        }
    }
    span.end();
}
