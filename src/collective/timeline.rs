//! Per-operation events in a bounded ring buffer, exportable as Chrome trace-event JSON
//! (loads in Perfetto or chrome://tracing): one process track per rank, one slice per
//! operation with its steps beneath.
//!
//! Timestamps are wall-clock microseconds since the Unix epoch, so the traces of ranks in
//! different processes (or on hosts whose clocks agree) line up when merged with
//! [`merge_traces`].

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

/// One step of an operation: what went to and came from which peer.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Step name, e.g. `reduce-scatter step 1/3`.
    pub name: Cow<'static, str>,
    /// Peer sent to and bytes sent.
    pub send: Option<(usize, usize)>,
    /// Peer received from and bytes received.
    pub recv: Option<(usize, usize)>,
    /// Start.
    pub start: Instant,
    /// End.
    pub end: Instant,
}

/// One finished operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Operation name.
    pub op: &'static str,
    /// Algorithm.
    pub algo: &'static str,
    /// Bytes of the operation's buffer.
    pub bytes: usize,
    /// Rank that recorded it.
    pub rank: usize,
    /// Start.
    pub start: Instant,
    /// End.
    pub end: Instant,
    /// Whether it succeeded.
    pub ok: bool,
    /// Its steps, in order.
    pub steps: Vec<Step>,
}

/// The bounded event buffer.
#[derive(Debug)]
pub struct Timeline {
    cap: usize,
    epoch: Instant,
    /// The wall-clock time of `epoch`.
    wall_epoch: SystemTime,
    events: Mutex<VecDeque<Event>>,
}

impl Timeline {
    /// Keeps at most `cap` events (0 keeps none).
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            epoch: Instant::now(),
            wall_epoch: SystemTime::now(),
            events: Mutex::new(VecDeque::new()),
        }
    }

    /// Records an event, dropping the oldest when full.
    pub fn push(&self, e: Event) {
        if self.cap == 0 {
            return;
        }
        let mut q = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == self.cap {
            q.pop_front();
        }
        q.push_back(e);
    }

    /// A copy of the events.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Chrome trace-event JSON (`traceEvents` with complete events, microseconds since the
    /// Unix epoch; the process is the rank), ending with a `process_name` record per rank.
    pub fn chrome_trace(&self) -> serde_json::Value {
        let base = self
            .wall_epoch
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1e6);
        let us = |t: Instant| base + t.saturating_duration_since(self.epoch).as_secs_f64() * 1e6;
        let mut ranks: Vec<usize> = Vec::new();
        let mut events: Vec<serde_json::Value> = self
            .events()
            .into_iter()
            .inspect(|e| {
                if !ranks.contains(&e.rank) {
                    ranks.push(e.rank);
                }
            })
            .flat_map(|e| {
                let steps: Vec<serde_json::Value> = e
                    .steps
                    .iter()
                    .map(|s| {
                        serde_json::json!({
                            "name": s.name,
                            "cat": "step",
                            "ph": "X",
                            "pid": e.rank,
                            "tid": e.rank,
                            "ts": us(s.start),
                            "dur": s.end.saturating_duration_since(s.start).as_secs_f64() * 1e6,
                            "args": {
                                "send_peer": s.send.map(|x| x.0), "send_bytes": s.send.map(|x| x.1),
                                "recv_peer": s.recv.map(|x| x.0), "recv_bytes": s.recv.map(|x| x.1)
                            }
                        })
                    })
                    .collect();
                std::iter::once(serde_json::json!({
                    "name": e.op,
                    "cat": e.algo,
                    "ph": "X",
                    "pid": e.rank,
                    "tid": e.rank,
                    "ts": us(e.start),
                    "dur": e.end.saturating_duration_since(e.start).as_secs_f64() * 1e6,
                    "args": {"bytes": e.bytes, "algo": e.algo, "ok": e.ok}
                }))
                .chain(steps)
            })
            .collect();
        events.extend(ranks.into_iter().map(|r| {
            serde_json::json!({"name": "process_name", "ph": "M", "pid": r, "args": {"name": format!("rank {r}")}})
        }));
        serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" })
    }
}

/// One trace from several ranks' [`Timeline::chrome_trace`] documents: their events in
/// one `traceEvents` list (each rank is already its own process track).
pub fn merge_traces(traces: &[serde_json::Value]) -> serde_json::Value {
    let events: Vec<serde_json::Value> = traces
        .iter()
        .filter_map(|t| t["traceEvents"].as_array())
        .flatten()
        .cloned()
        .collect();
    serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_exportable() {
        let t = Timeline::new(2);
        let now = Instant::now();
        for i in 0..3 {
            t.push(Event {
                op: ["op0", "op1", "op2"][i],
                algo: "ring",
                bytes: i,
                rank: 1,
                start: now,
                end: now,
                ok: true,
                steps: vec![Step {
                    name: "s".into(),
                    send: Some((0, 8)),
                    recv: None,
                    start: now,
                    end: now,
                }],
            });
        }
        let ev = t.events();
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].op, "op1");
        let j = t.chrome_trace();
        assert_eq!(
            j["traceEvents"].as_array().unwrap().len(),
            5,
            "2 ops, 1 step each, and the rank's name"
        );
        assert_eq!(j["traceEvents"][4]["ph"], "M");
        assert_eq!(j["traceEvents"][4]["args"]["name"], "rank 1");
        // Wall-clock microseconds: within a minute of now.
        let now_us = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            * 1e6;
        let ts = j["traceEvents"][0]["ts"].as_f64().unwrap();
        assert!((now_us - ts).abs() < 60e6, "{ts} vs {now_us}");
        let merged = merge_traces(&[j.clone(), j.clone()]);
        assert_eq!(merged["traceEvents"].as_array().unwrap().len(), 10);
        assert_eq!(j["traceEvents"][1]["args"]["send_bytes"], 8);
        assert_eq!(j["traceEvents"][0]["ph"], "X");
        assert_eq!(j["traceEvents"][0]["tid"], 1);
    }
}
