//! `hcclwatch bench`: the collective engine measured the way `hccl_test` and nccl-tests
//! measure, with the same flags and the nccl-tests table.
//!
//! Conventions (nccl-tests `doc/PERFORMANCE.md`): `size` is the whole buffer S in bytes
//! (for all-gather, reduce-scatter and all-to-all the full n-rank array); `time` is the
//! slowest rank's mean over `-n` iterations after `-w` warm-ups; `algbw = S / time` in
//! decimal GB/s; `busbw = algbw × factor` with 2(n−1)/n for all-reduce, (n−1)/n for
//! all-gather, reduce-scatter and all-to-all, 1 for broadcast, reduce and send/recv;
//! `#wrong` counts elements that differ from a reference computed independently on every
//! rank (`-c 1`).

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::Instant;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::collective::{CollResult, Communicator, DataType, ReduceOp};

/// The operations `bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchOp {
    /// All-reduce.
    AllReduce,
    /// All-gather.
    AllGather,
    /// Reduce-scatter.
    ReduceScatter,
    /// Broadcast.
    Broadcast,
    /// Reduce.
    Reduce,
    /// All-to-all.
    AllToAll,
    /// Send/recv around a ring (each rank sends to the next).
    SendRecv,
    /// One direction: rank 0 sends to rank 1, the others idle (compare with one TCP
    /// stream).
    P2p,
}

impl BenchOp {
    /// Parses `allreduce`, `all_reduce`, `all-reduce` and the like.
    pub fn parse(s: &str) -> Option<Self> {
        Some(
            match s.to_ascii_lowercase().replace(['_', '-'], "").as_str() {
                "allreduce" => BenchOp::AllReduce,
                "allgather" => BenchOp::AllGather,
                "reducescatter" => BenchOp::ReduceScatter,
                "broadcast" | "bcast" => BenchOp::Broadcast,
                "reduce" => BenchOp::Reduce,
                "alltoall" => BenchOp::AllToAll,
                "sendrecv" => BenchOp::SendRecv,
                "p2p" | "send" => BenchOp::P2p,
                _ => return None,
            },
        )
    }

    /// Name in output.
    pub fn name(self) -> &'static str {
        match self {
            BenchOp::AllReduce => "all_reduce",
            BenchOp::AllGather => "all_gather",
            BenchOp::ReduceScatter => "reduce_scatter",
            BenchOp::Broadcast => "broadcast",
            BenchOp::Reduce => "reduce",
            BenchOp::AllToAll => "all_to_all",
            BenchOp::SendRecv => "sendrecv",
            BenchOp::P2p => "p2p",
        }
    }

    /// nccl-tests bus-bandwidth factor for `n` ranks.
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            BenchOp::AllReduce => 2.0 * (n - 1.0) / n,
            BenchOp::AllGather | BenchOp::ReduceScatter | BenchOp::AllToAll => (n - 1.0) / n,
            BenchOp::Broadcast | BenchOp::Reduce | BenchOp::SendRecv | BenchOp::P2p => 1.0,
        }
    }

    /// Whether the operation reduces (and so has a `redop`).
    pub fn reduces(self) -> bool {
        matches!(
            self,
            BenchOp::AllReduce | BenchOp::ReduceScatter | BenchOp::Reduce
        )
    }

    fn rooted(self) -> bool {
        matches!(self, BenchOp::Broadcast | BenchOp::Reduce)
    }

    /// Elements per `size` bytes must divide by this (per-rank blocks).
    fn granule(self, n: usize) -> usize {
        match self {
            BenchOp::AllGather | BenchOp::ReduceScatter | BenchOp::AllToAll => n,
            _ => 1,
        }
    }
}

/// Benchmark settings (the hccl_test / nccl-tests flags).
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Operation.
    pub op: BenchOp,
    /// `-b`.
    pub min_bytes: usize,
    /// `-e`.
    pub max_bytes: usize,
    /// `-f` (multiplicative step; 0 or 1 means use `-i`).
    pub step_factor: usize,
    /// `-i` (additive step; 0 with `-f` unset repeats `-b`).
    pub step_bytes: usize,
    /// `-n`.
    pub iters: usize,
    /// `-w`.
    pub warmup: usize,
    /// `-c`: 0 off, 1 check.
    pub check: bool,
    /// `-o`.
    pub redop: ReduceOp,
    /// `-d`.
    pub dtype: DataType,
    /// `-r`.
    pub root: usize,
}

/// One line of the table.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Row {
    /// Operation.
    pub op: &'static str,
    /// Algorithm used.
    pub algo: String,
    /// Ranks.
    pub ranks: usize,
    /// Bytes (S).
    pub size: usize,
    /// Elements (S / type size).
    pub count: usize,
    /// Type.
    #[serde(rename = "type")]
    pub dtype: &'static str,
    /// Reduction operator, or "none".
    pub redop: &'static str,
    /// Root, or -1.
    pub root: i64,
    /// Slowest rank's mean time, µs.
    pub time_us: f64,
    /// GB/s.
    pub algbw: f64,
    /// GB/s.
    pub busbw: f64,
    /// Elements that failed the check (None with `-c 0`).
    pub wrong: Option<u64>,
}

/// The sizes of a sweep, each rounded down to a whole number of per-rank blocks.
pub fn sizes(o: &BenchOptions, n: usize) -> Vec<usize> {
    let unit = o.dtype.size() * o.op.granule(n);
    let round = |s: usize| (s / unit) * unit;
    let mut out = Vec::new();
    let mut s = o.min_bytes;
    loop {
        let r = round(s);
        if out.last() != Some(&r) {
            out.push(r);
        }
        let next = if o.step_factor > 1 {
            s.saturating_mul(o.step_factor)
        } else if o.step_bytes > 0 {
            s.saturating_add(o.step_bytes)
        } else {
            break;
        };
        if next > o.max_bytes || next == s || out.len() > 4096 {
            break;
        }
        s = next;
    }
    out
}

/// Input element `i` of rank `r`: small integers, so every reduction of every type is
/// exact and the reference needs no tolerance.
pub fn input(op: ReduceOp, r: usize, i: usize) -> f64 {
    match op {
        ReduceOp::Prod => 1.0 + ((r + i) % 2) as f64 * if i.is_multiple_of(7) { 1.0 } else { 0.0 },
        _ => ((r * 7 + i * 3) % 5) as f64 + 1.0,
    }
}

fn fill(d: DataType, op: ReduceOp, r: usize, count: usize, offset: usize) -> Vec<u8> {
    let mut b = vec![0u8; count * d.size()];
    for i in 0..count {
        d.set(&mut b, i, input(op, r, i + offset));
    }
    b
}

fn reference(d: DataType, op: ReduceOp, n: usize, i: usize) -> f64 {
    let mut acc = input(op, 0, i);
    for r in 1..n {
        acc = op.apply_f64(acc, input(op, r, i));
    }
    // Store through the type, so wrapping and rounding match what the engine stores.
    let mut b = vec![0u8; d.size()];
    d.set(&mut b, 0, acc);
    d.get(&b, 0)
}

fn count_wrong(d: DataType, got: &[u8], want: impl Fn(usize) -> f64) -> u64 {
    (0..got.len() / d.size())
        .filter(|&i| d.get(got, i) != want(i))
        .count() as u64
}

struct Buffers {
    send: Vec<u8>,
    recv: Vec<u8>,
}

/// Runs the operation once on prepared buffers. The buffers are bulk payloads: tagged
/// only with `--authenticate-payloads`.
fn run_once(
    c: &mut Communicator,
    o: &BenchOptions,
    b: &mut Buffers,
    count: usize,
) -> CollResult<String> {
    let mut bulk = c.bulk();
    let c = &mut *bulk;
    let (n, r) = (c.size(), c.rank());
    let d = o.dtype;
    let algo = match o.op {
        BenchOp::AllReduce => c
            .all_reduce(&b.send, &mut b.recv, count, d, o.redop)?
            .name()
            .to_string(),
        BenchOp::AllGather => c
            .all_gather(&b.send, &mut b.recv, count / n, d)?
            .name()
            .to_string(),
        BenchOp::ReduceScatter => c
            .reduce_scatter(&b.send, &mut b.recv, count / n, d, o.redop)?
            .name()
            .to_string(),
        BenchOp::Broadcast => {
            c.broadcast(&mut b.recv, count, d, o.root)?;
            "binomial".into()
        }
        BenchOp::Reduce => {
            c.reduce(&b.send, &mut b.recv, count, d, o.redop, o.root)?;
            "binomial".into()
        }
        BenchOp::AllToAll => {
            c.all_to_all(&b.send, &mut b.recv, count / n, d)?;
            "pairwise".into()
        }
        BenchOp::SendRecv => {
            let (to, from) = ((r + 1) % n, (r + n - 1) % n);
            if n > 1 {
                if r % 2 == 0 {
                    c.send(&b.send, count, d, to)?;
                    c.recv(&mut b.recv, count, d, from)?;
                } else {
                    c.recv(&mut b.recv, count, d, from)?;
                    c.send(&b.send, count, d, to)?;
                }
            } else {
                b.recv.copy_from_slice(&b.send);
            }
            "p2p".into()
        }
        BenchOp::P2p => {
            match r {
                0 if n > 1 => c.send(&b.send, count, d, 1)?,
                1 => c.recv(&mut b.recv, count, d, 0)?,
                _ => {}
            }
            "p2p".into()
        }
    };
    Ok(algo)
}

fn prepare(o: &BenchOptions, n: usize, r: usize, count: usize) -> Buffers {
    let d = o.dtype;
    let (send_n, recv_n) = match o.op {
        BenchOp::AllReduce | BenchOp::SendRecv | BenchOp::AllToAll | BenchOp::P2p => (count, count),
        BenchOp::AllGather => (count / n, count),
        BenchOp::ReduceScatter => (count, count / n),
        BenchOp::Broadcast => (0, count),
        BenchOp::Reduce => (count, if r == o.root { count } else { 0 }),
    };
    let mut b = Buffers {
        send: fill(d, o.redop, r, send_n, 0),
        recv: vec![0u8; recv_n * d.size()],
    };
    if o.op == BenchOp::Broadcast && r == o.root {
        b.recv = fill(d, o.redop, o.root, count, 0);
    }
    b
}

fn verify(o: &BenchOptions, n: usize, r: usize, count: usize, b: &Buffers) -> u64 {
    let d = o.dtype;
    let block = count / n.max(1);
    match o.op {
        BenchOp::AllReduce => count_wrong(d, &b.recv, |i| reference(d, o.redop, n, i)),
        BenchOp::Reduce if r == o.root => count_wrong(d, &b.recv, |i| reference(d, o.redop, n, i)),
        BenchOp::Reduce => 0,
        BenchOp::ReduceScatter => {
            count_wrong(d, &b.recv, |i| reference(d, o.redop, n, r * block + i))
        }
        BenchOp::AllGather => count_wrong(d, &b.recv, |i| {
            let (src, j) = (i / block, i % block);
            d.get(&fill(d, o.redop, src, 1, j), 0)
        }),
        BenchOp::Broadcast => {
            count_wrong(d, &b.recv, |i| d.get(&fill(d, o.redop, o.root, 1, i), 0))
        }
        BenchOp::AllToAll => count_wrong(d, &b.recv, |i| {
            // Block p of rank src's input went to rank p; we hold block r of each src.
            let (src, j) = (i / block, i % block);
            d.get(&fill(d, o.redop, src, 1, r * block + j), 0)
        }),
        BenchOp::SendRecv => {
            let from = (r + n - 1) % n;
            count_wrong(d, &b.recv, |i| d.get(&fill(d, o.redop, from, 1, i), 0))
        }
        BenchOp::P2p if r == 1 => count_wrong(d, &b.recv, |i| d.get(&fill(d, o.redop, 0, 1, i), 0)),
        BenchOp::P2p => 0,
    }
}

/// Slowest rank's value of `x` (an f64 max all-reduce).
fn max_over_ranks(c: &mut Communicator, x: f64) -> CollResult<f64> {
    let mut b = x.to_ne_bytes();
    c.all_reduce_in_place(&mut b, 1, DataType::Fp64, ReduceOp::Max)?;
    Ok(f64::from_ne_bytes(b))
}

fn sum_over_ranks(c: &mut Communicator, x: u64) -> CollResult<u64> {
    let mut b = x.to_ne_bytes();
    c.all_reduce_in_place(&mut b, 1, DataType::Uint64, ReduceOp::Sum)?;
    Ok(u64::from_ne_bytes(b))
}

/// Runs the sweep on this rank; every rank returns the same rows. `progress` is called
/// after each size with (done, total).
pub fn run(
    c: &mut Communicator,
    o: &BenchOptions,
    mut progress: impl FnMut(usize, usize),
) -> CollResult<Vec<Row>> {
    let (n, r) = (c.size(), c.rank());
    let sizes = sizes(o, n);
    let mut rows = Vec::new();
    for (k, &size) in sizes.iter().enumerate() {
        let count = size / o.dtype.size();
        let mut bufs = prepare(o, n, r, count);
        let mut algo = String::new();
        for _ in 0..o.warmup {
            algo = run_once(c, o, &mut bufs, count)?;
        }
        c.barrier()?;
        let t0 = Instant::now();
        for _ in 0..o.iters.max(1) {
            algo = run_once(c, o, &mut bufs, count)?;
        }
        let mean = t0.elapsed().as_secs_f64() / o.iters.max(1) as f64;
        let time = max_over_ranks(c, mean)?;
        let wrong = if o.check {
            let mut fresh = prepare(o, n, r, count);
            run_once(c, o, &mut fresh, count)?;
            Some(sum_over_ranks(c, verify(o, n, r, count, &fresh))?)
        } else {
            None
        };
        let algbw = if time > 0.0 {
            size as f64 / time / 1e9
        } else {
            0.0
        };
        rows.push(Row {
            op: o.op.name(),
            algo,
            ranks: n,
            size,
            count,
            dtype: o.dtype.name(),
            redop: if o.op.reduces() {
                o.redop.name()
            } else {
                "none"
            },
            root: if o.op.rooted() { o.root as i64 } else { -1 },
            time_us: time * 1e6,
            algbw,
            busbw: algbw * o.op.bus_factor(n),
            wrong,
        });
        progress(k + 1, sizes.len());
    }
    Ok(rows)
}

/// The nccl-tests table.
pub fn table(rows: &[Row], header: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {header}");
    let _ = writeln!(s, "#");
    let _ = writeln!(
        s,
        "# {:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>6}  algo",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"
    );
    let _ = writeln!(
        s,
        "# {:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>6}",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""
    );
    for r in rows {
        let wrong = r.wrong.map_or_else(|| "N/A".to_string(), |w| w.to_string());
        let _ = writeln!(
            s,
            "  {:>12} {:>12} {:>8} {:>6} {:>6} {:>10.2} {:>8.3} {:>8.3} {:>6}  {}",
            r.size, r.count, r.dtype, r.redop, r.root, r.time_us, r.algbw, r.busbw, wrong, r.algo
        );
    }
    let max_bw = rows.iter().map(|r| r.busbw).fold(0.0, f64::max);
    let total_wrong: u64 = rows.iter().filter_map(|r| r.wrong).sum();
    let _ = writeln!(
        s,
        "# Out of bounds values : {total_wrong} {}",
        if total_wrong == 0 { "OK" } else { "FAILED" }
    );
    let _ = writeln!(s, "# Peak bus bandwidth    : {max_bw:.3} GB/s");
    s
}

/// The chart's size: the SVG's user units and the PNG's pixels.
const PLOT_SIZE: (u32, u32) = (720, 420);

/// Series colours, one per (op, algo) line in order of first appearance.
const COLOURS: [RGBColor; 5] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
];

/// DejaVu Sans cut down to printable ASCII (`assets/fonts/README.md`). plotters needs a
/// font to measure and rasterise text; a bundled one makes the PNG independent of the
/// fonts installed where the benchmark runs.
const FONT: &[u8] = include_bytes!("../assets/fonts/DejaVuSans-ascii.ttf");

/// Why the chart could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The bundled font did not parse.
    #[error("the bundled chart font could not be loaded")]
    Font,
    /// plotters failed to draw.
    #[error("drawing the chart: {0}")]
    Draw(String),
    /// The PNG encoder failed.
    #[error("encoding the PNG: {0}")]
    Png(#[from] png::EncodingError),
}

/// Registers the bundled font as plotters' sans-serif, once per process.
fn load_font() -> Result<(), PlotError> {
    static LOADED: OnceLock<bool> = OnceLock::new();
    let ok = *LOADED.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
    if ok { Ok(()) } else { Err(PlotError::Font) }
}

/// One line per (op, algo), in order of first appearance: its name and its points as
/// (size in bytes, busbw in GB/s).
fn series(rows: &[Row]) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in rows {
        let key = format!("{} {}", r.op, r.algo);
        let p = (r.size.max(1) as f64, r.busbw);
        match series.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(p),
            None => series.push((key, vec![p])),
        }
    }
    series
}

/// A size tick as hccl_test writes sizes: `512`, `64K`, `1M`, `2G`.
fn size_label(bytes: f64) -> String {
    let b = bytes.round() as u64;
    [(30, "G"), (20, "M"), (10, "K")]
        .into_iter()
        .find(|(shift, _)| b >= 1 << shift && b.is_multiple_of(1 << shift))
        .map_or_else(
            || b.to_string(),
            |(shift, unit)| format!("{}{unit}", b >> shift),
        )
}

/// Draws busbw against size (log-2 x axis), one line per (op, algo), on any backend.
fn draw<DB: DrawingBackend>(area: DrawingArea<DB, Shift>, rows: &[Row]) -> Result<(), PlotError> {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| PlotError::Draw(e.to_string());
    area.fill(&WHITE).map_err(fail)?;
    let (lo, hi) = rows
        .iter()
        .map(|r| r.size.max(1) as f64)
        .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    // One size (or none) still needs an axis of some width.
    let (lo, hi) = match (lo, hi) {
        _ if rows.is_empty() => (1.0, 2.0),
        (a, b) if a == b => (a / 2.0, b * 2.0),
        ab => ab,
    };
    let ymax = rows.iter().map(|r| r.busbw).fold(0.0, f64::max).max(1e-9) * 1.1;
    let mut chart = ChartBuilder::on(&area)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale().base(2.0), 0.0..ymax)
        .map_err(fail)?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 15))
        .x_desc("message size (bytes, log scale)")
        .y_desc("busbw (GB/s)")
        .x_label_formatter(&|x| size_label(*x))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .draw()
        .map_err(fail)?;
    for (i, (name, points)) in series(rows).into_iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)).point_size(3))
            .map_err(fail)?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE)
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(fail)?;
    area.present().map_err(fail)
}

/// An SVG chart of busbw against size (log-2 axis), one line per (op, algo).
pub fn svg(rows: &[Row]) -> Result<String, PlotError> {
    load_font()?;
    let mut out = String::new();
    draw(
        SVGBackend::with_string(&mut out, PLOT_SIZE).into_drawing_area(),
        rows,
    )?;
    Ok(out)
}

/// The same chart as [`svg`], as an RGB PNG image.
pub fn png(rows: &[Row]) -> Result<Vec<u8>, PlotError> {
    load_font()?;
    let (w, h) = PLOT_SIZE;
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    draw(
        BitMapBackend::with_buffer(&mut rgb, PLOT_SIZE).into_drawing_area(),
        rows,
    )?;
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header()?.write_image_data(&rgb)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(op: BenchOp) -> BenchOptions {
        BenchOptions {
            op,
            min_bytes: 8,
            max_bytes: 1 << 20,
            step_factor: 2,
            step_bytes: 0,
            iters: 1,
            warmup: 0,
            check: true,
            redop: ReduceOp::Sum,
            dtype: DataType::Fp32,
            root: 0,
        }
    }

    #[test]
    fn bus_factors_match_nccl_tests() {
        assert_eq!(BenchOp::AllReduce.bus_factor(4), 1.5);
        assert_eq!(BenchOp::AllGather.bus_factor(4), 0.75);
        assert_eq!(BenchOp::Broadcast.bus_factor(4), 1.0);
        assert_eq!(BenchOp::parse("all_reduce"), Some(BenchOp::AllReduce));
        assert_eq!(
            BenchOp::parse("reduce-scatter"),
            Some(BenchOp::ReduceScatter)
        );
        assert_eq!(BenchOp::parse("gather"), None);
    }

    #[test]
    fn sweep_sizes() {
        let s = sizes(&opts(BenchOp::AllReduce), 2);
        assert_eq!(s.first(), Some(&8));
        assert_eq!(s.last(), Some(&(1 << 20)));
        assert_eq!(s.len(), 18);
        // All-gather sizes are whole per-rank blocks: 3 ranks × 4 bytes.
        let s = sizes(&opts(BenchOp::AllGather), 3);
        assert!(s.iter().all(|x| x % 12 == 0), "{s:?}");
        let mut o = opts(BenchOp::AllReduce);
        o.step_factor = 0;
        o.step_bytes = 100;
        o.min_bytes = 100;
        o.max_bytes = 400;
        assert_eq!(sizes(&o, 2), vec![100, 200, 300, 400]);
    }

    #[test]
    fn reference_is_exact_for_every_type() {
        for d in DataType::ALL {
            for op in ReduceOp::ALL {
                let v = reference(d, op, 8, 3);
                assert!(v.is_finite() && v.fract() == 0.0, "{d:?} {op:?} {v}");
            }
        }
    }

    fn row(size: usize, busbw: f64) -> Row {
        Row {
            op: "all_reduce",
            algo: "ring".into(),
            ranks: 2,
            size,
            count: size / 4,
            dtype: "fp32",
            redop: "sum",
            root: -1,
            time_us: 1.0,
            algbw: busbw,
            busbw,
            wrong: Some(0),
        }
    }

    /// A sweep of one size, and an empty one, still make a chart: the axis gets a width.
    #[test]
    fn charts_of_one_size_and_of_none() {
        for rows in [vec![row(1 << 20, 3.5)], vec![]] {
            let svg = svg(&rows).unwrap();
            assert!(
                svg.starts_with("<svg") && svg.contains("busbw (GB/s)"),
                "{svg}"
            );
            let png = png(&rows).unwrap();
            assert_eq!(&png[1..4], b"PNG");
        }
    }

    #[test]
    fn size_labels_read_like_hccl_test_sizes() {
        assert_eq!(size_label(512.0), "512");
        assert_eq!(size_label(65536.0), "64K");
        assert_eq!(size_label(1048576.0), "1M");
        assert_eq!(size_label(2.0 * 1073741824.0), "2G");
        assert_eq!(size_label(1536.0), "1536");
    }
}
