//! The reference the results are checked against: each rank's input, and the reduction
//! of what the ranks stored, computed with the test's own arithmetic.

use hcclwatch::collective::{Communicator, DataType, ReduceOp};

use crate::world::on_all;

/// Input value of element `i` on rank `r` for operator `op`.
fn input(d: DataType, op: ReduceOp, r: usize, i: usize) -> f64 {
    let small = ((r * 7 + i * 3) % 5) as f64;
    match op {
        ReduceOp::Prod => 1.0 + ((r + i) % 2) as f64,
        _ if d.is_float() => 0.1 * (r as f64 + 1.0) + 0.013 * (i % 97) as f64,
        _ => {
            small
                + 1.0
                + if matches!(
                    d,
                    DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
                ) {
                    -2.0
                } else {
                    0.0
                }
        }
    }
}

pub(crate) fn fill(d: DataType, op: ReduceOp, r: usize, count: usize, offset: usize) -> Vec<u8> {
    let mut b = vec![0u8; count * d.size()];
    for i in 0..count {
        d.set(&mut b, i, input(d, op, r, i + offset));
    }
    b
}

/// The reference reduction's own arithmetic, in f64: written here rather than taken from
/// the engine (`ReduceOp::apply_f64` is what the engine's 16-bit reductions run), so a
/// wrong operator in the engine cannot also be in the reference.
fn reference_op(op: ReduceOp, a: f64, b: f64) -> f64 {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Prod => a * b,
        ReduceOp::Max => {
            if b > a {
                b
            } else {
                a
            }
        }
        ReduceOp::Min => {
            if b < a {
                b
            } else {
                a
            }
        }
    }
}

/// Element `i` of `buf` as a number. The 16-bit floats are decoded with the `half` crate
/// here, not through the engine's `DataType::get`, so the reference does not share the
/// engine's conversions either.
fn element(d: DataType, buf: &[u8], i: usize) -> f64 {
    let two = |b: &[u8]| [b[2 * i], b[2 * i + 1]];
    match d {
        DataType::Fp16 => half::f16::from_ne_bytes(two(buf)).to_f64(),
        DataType::Bf16 => half::bf16::from_ne_bytes(two(buf)).to_f64(),
        _ => d.get(buf, i),
    }
}

/// What rank `r` stored for element `i`: its input rounded to the type. The 16-bit floats
/// round through the `half` crate (to nearest, ties to even, as IEEE 754 and bfloat16
/// define it); the other types through the engine's encoding.
fn stored(d: DataType, op: ReduceOp, r: usize, i: usize) -> f64 {
    let v = input(d, op, r, i);
    match d {
        DataType::Fp16 => half::f16::from_f64(v).to_f64(),
        DataType::Bf16 => half::bf16::from_f64(v).to_f64(),
        _ => d.get(&fill(d, op, r, 1, i), 0),
    }
}

/// Compares `got` with the reduction of what each rank actually stored.
pub(crate) fn check_reduced(
    d: DataType,
    op: ReduceOp,
    n: usize,
    got: &[u8],
    count: usize,
    offset: usize,
    what: &str,
) {
    for i in 0..count {
        let mut acc: Option<f64> = None;
        for r in 0..n {
            let v = stored(d, op, r, i + offset);
            acc = Some(acc.map_or(v, |a| reference_op(op, a, v)));
        }
        let want = acc.unwrap();
        let g = element(d, got, i);
        if d.is_float() {
            let tol = d.tolerance(n) * want.abs().max(1.0);
            assert!(
                (g - want).abs() <= tol,
                "{what}: element {i}: got {g}, want {want} ± {tol}"
            );
        } else {
            let mut w = vec![0u8; d.size()];
            d.set(&mut w, 0, want);
            assert_eq!(g, d.get(&w, 0), "{what}: element {i}");
        }
    }
}

/// Receive buffers start filled with this byte, so a part that no step writes is wrong.
pub(crate) const POISON: u8 = 0xA5;

/// Out-of-place int32 sum all-reduce of `count` elements on every rank, checked.
pub(crate) fn all_reduce_int32(comms: &mut [Communicator], n: usize, count: usize, what: &str) {
    let outs = on_all(comms, |r, c| {
        let send = fill(DataType::Int32, ReduceOp::Sum, r, count, 0);
        let mut recv = vec![POISON; send.len()];
        c.all_reduce(&send, &mut recv, count, DataType::Int32, ReduceOp::Sum)
            .unwrap();
        recv
    });
    for o in outs {
        check_reduced(DataType::Int32, ReduceOp::Sum, n, &o, count, 0, what);
    }
}
