//! The reduction kernels at the sizes the transport feeds them: one 512 KiB chunk (the
//! default frame, cache-resident) and 16 MiB (past the cache), fp32 sum, in place
//! (`reduce_into`) against copy-then-reduce and the three-operand `reduce_apart` that
//! out-of-place collectives use.
//!
//! Run: `cargo bench --bench reduce`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hcclwatch::collective::dtype::{DataType, ReduceOp, reduce_apart, reduce_into};

fn kernels(c: &mut Criterion) {
    for len in [512 << 10, 16 << 20] {
        let own = vec![1u8; len];
        let other = vec![2u8; len];
        let mut dst = vec![0u8; len];
        let mut g = c.benchmark_group(format!("fp32_sum_{}KiB", len >> 10));
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function("reduce_into", |b| {
            b.iter(|| reduce_into(ReduceOp::Sum, DataType::Fp32, &mut dst, black_box(&other)))
        });
        g.bench_function("copy_then_reduce_into", |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&own));
                reduce_into(ReduceOp::Sum, DataType::Fp32, &mut dst, black_box(&other))
            })
        });
        g.bench_function("reduce_apart", |b| {
            b.iter(|| {
                reduce_apart(
                    ReduceOp::Sum,
                    DataType::Fp32,
                    &mut dst,
                    black_box(&own),
                    black_box(&other),
                )
            })
        });
        g.finish();
    }
}

criterion_group!(benches, kernels);
criterion_main!(benches);
