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
use std::time::Instant;

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

/// Runs the operation once on prepared buffers.
fn run_once(
    c: &mut Communicator,
    o: &BenchOptions,
    b: &mut Buffers,
    count: usize,
) -> CollResult<String> {
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

/// The chart both renderers draw: busbw against size on a log2 axis, one line per
/// (op, algo).
struct Chart {
    w: f64,
    h: f64,
    m: f64,
    xmin: f64,
    xmax: f64,
    ymax: f64,
    /// (name, points as (log2 size, busbw GB/s)).
    series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Series colours (RGB).
const COLOURS: [[u8; 3]; 5] = [
    [0x1f, 0x77, 0xb4],
    [0xd6, 0x27, 0x28],
    [0x2c, 0xa0, 0x2c],
    [0xff, 0x7f, 0x0e],
    [0x94, 0x67, 0xbd],
];

impl Chart {
    fn new(rows: &[Row]) -> Chart {
        let xs: Vec<f64> = rows.iter().map(|r| (r.size.max(1) as f64).log2()).collect();
        let (xmin, xmax) = xs
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
        let ymax = rows.iter().map(|r| r.busbw).fold(0.0, f64::max).max(1e-9) * 1.1;
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for r in rows {
            let key = format!("{} {}", r.op, r.algo);
            let p = ((r.size.max(1) as f64).log2(), r.busbw);
            match series.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => v.push(p),
                None => series.push((key, vec![p])),
            }
        }
        Chart {
            w: 720.0,
            h: 420.0,
            m: 60.0,
            xmin: if rows.is_empty() { 0.0 } else { xmin },
            xmax: if rows.is_empty() { 1.0 } else { xmax },
            ymax,
            series,
        }
    }
    fn sx(&self, x: f64) -> f64 {
        self.m + (x - self.xmin) / (self.xmax - self.xmin).max(1.0) * (self.w - 2.0 * self.m)
    }
    fn sy(&self, y: f64) -> f64 {
        self.h - self.m - y / self.ymax * (self.h - 2.0 * self.m)
    }
    /// Labelled x ticks: (log2 size, label).
    fn x_ticks(&self) -> Vec<(f64, String)> {
        let mut out = Vec::new();
        let mut x = self.xmin.ceil();
        while x <= self.xmax {
            out.push((x, format!("2^{x}")));
            x += ((self.xmax - self.xmin) / 8.0).ceil().max(1.0);
        }
        out
    }
    /// Labelled y ticks: (busbw, label).
    fn y_ticks(&self) -> Vec<(f64, String)> {
        (0..=4)
            .map(|i| {
                let y = self.ymax * f64::from(i) / 4.0;
                (y, format!("{y:.2}"))
            })
            .collect()
    }
}

const X_TITLE: &str = "message size (bytes, log2)";
const Y_TITLE: &str = "busbw (GB/s)";

/// An SVG chart of busbw against size (log2 axis), one line per (op, algo).
pub fn svg(rows: &[Row]) -> String {
    let c = Chart::new(rows);
    let (w, h, m) = (c.w, c.h, c.m);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<line x1="{m}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
        h - m,
        w - m,
        h - m
    );
    let _ = writeln!(
        s,
        r#"<line x1="{m}" y1="{m}" x2="{m}" y2="{}" stroke="black"/>"#,
        h - m
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{X_TITLE}</text>"#,
        w / 2.0,
        h - 15.0
    );
    let _ = writeln!(
        s,
        r#"<text x="15" y="{}" transform="rotate(-90 15 {})" text-anchor="middle">{Y_TITLE}</text>"#,
        h / 2.0,
        h / 2.0
    );
    for (y, label) in c.y_ticks() {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{label}</text>"#,
            m - 5.0,
            c.sy(y) + 4.0
        );
    }
    for (x, label) in c.x_ticks() {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{label}</text>"#,
            c.sx(x),
            h - m + 16.0
        );
    }
    for (i, (name, pts)) in c.series.iter().enumerate() {
        let [r, g, b] = COLOURS[i % COLOURS.len()];
        let colour = format!("#{r:02x}{g:02x}{b:02x}");
        let points: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", c.sx(*x), c.sy(*y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" fill="{colour}">{name}</text>"#,
            m + 10.0,
            m + 15.0 * (i as f64 + 1.0)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// An RGB raster with just what the chart needs: thick lines and 8×8 bitmap text.
struct Raster {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Raster {
    fn new(w: usize, h: usize) -> Raster {
        Raster {
            w,
            h,
            px: vec![0xff; w * h * 3],
        }
    }
    fn dot(&mut self, x: i64, y: i64, c: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            let i = (y as usize * self.w + x as usize) * 3;
            self.px[i..i + 3].copy_from_slice(&c);
        }
    }
    /// A line `thick` pixels wide (a square brush stepped along the longer axis).
    fn line(&mut self, (x0, y0): (f64, f64), (x1, y1): (f64, f64), thick: i64, c: [u8; 3]) {
        let steps = (x1 - x0).abs().max((y1 - y0).abs()).ceil().max(1.0) as i64;
        for k in 0..=steps {
            let t = k as f64 / steps as f64;
            let (x, y) = (
                (x0 + t * (x1 - x0)).round() as i64,
                (y0 + t * (y1 - y0)).round() as i64,
            );
            for dx in 0..thick {
                for dy in 0..thick {
                    self.dot(x + dx - thick / 2, y + dy - thick / 2, c);
                }
            }
        }
    }
    /// Text with its top-left corner at (x, y); `vertical` writes it bottom-up.
    fn text(&mut self, x: f64, y: f64, s: &str, c: [u8; 3], vertical: bool) {
        use font8x8::UnicodeFonts as _;
        for (k, ch) in s.chars().enumerate() {
            let glyph = font8x8::BASIC_FONTS.get(ch).unwrap_or([0; 8]);
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits & (1 << col) != 0 {
                        let (gx, gy) = (k as i64 * 8 + col, row as i64);
                        let (px, py) = if vertical {
                            (x as i64 + gy, y as i64 - gx)
                        } else {
                            (x as i64 + gx, y as i64 + gy)
                        };
                        self.dot(px, py, c);
                    }
                }
            }
        }
    }
}

/// The same chart as [`svg`], as a PNG image.
pub fn png(rows: &[Row]) -> Result<Vec<u8>, png::EncodingError> {
    let c = Chart::new(rows);
    let (w, h, m) = (c.w, c.h, c.m);
    let mut r = Raster::new(w as usize, h as usize);
    let black = [0, 0, 0];
    r.line((m, h - m), (w - m, h - m), 1, black);
    r.line((m, m), (m, h - m), 1, black);
    let width = |s: &str| 8.0 * s.chars().count() as f64;
    r.text(
        w / 2.0 - width(X_TITLE) / 2.0,
        h - 22.0,
        X_TITLE,
        black,
        false,
    );
    r.text(8.0, h / 2.0 + width(Y_TITLE) / 2.0, Y_TITLE, black, true);
    for (y, label) in c.y_ticks() {
        r.text(m - 6.0 - width(&label), c.sy(y) - 4.0, &label, black, false);
    }
    for (x, label) in c.x_ticks() {
        r.text(
            c.sx(x) - width(&label) / 2.0,
            h - m + 8.0,
            &label,
            black,
            false,
        );
    }
    for (i, (name, pts)) in c.series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        for pair in pts.windows(2) {
            let (a, b) = (
                (c.sx(pair[0].0), c.sy(pair[0].1)),
                (c.sx(pair[1].0), c.sy(pair[1].1)),
            );
            r.line(a, b, 2, colour);
        }
        if let [(x, y)] = pts.as_slice() {
            r.line(
                (c.sx(*x) - 2.0, c.sy(*y)),
                (c.sx(*x) + 2.0, c.sy(*y)),
                4,
                colour,
            );
        }
        r.text(m + 10.0, m + 4.0 + 15.0 * i as f64, name, colour, false);
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, r.w as u32, r.h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.write_header()?.write_image_data(&r.px)?;
    }
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
}
