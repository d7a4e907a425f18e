//! Cost of signed all-gathers (issue 27) per probe round at 64 members, on one member:
//! it signs its own block and checks the 63 others', for each of a round's three signed
//! gathers (plan, row, device-plane row). Blocks are sized as at 64 members: the plan's
//! 8-byte words, a row of its layout, fixed fields and 64 plan slots, and a device row of
//! 16 ports × 4 pings × 5 fields. The plain gather did neither, so this is the whole added
//! CPU; the bytes added on the wire (64 per block) and the ring's step count are in
//! docs/benchmarks.md.
//!
//! Run: `cargo bench --bench signing`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use hcclwatch::collective::authorship::{Authors, RowKey, Statement};

const MEMBERS: usize = 64;

fn what(gather: usize, author: usize) -> Statement<'static> {
    Statement {
        comm_id: 7,
        seq: gather as u64,
        context: "probe row",
        author,
    }
}

/// One round on member 0: sign its own block of each gather, check every other member's.
fn round(me: &RowKey, authors: &Authors, blocks: &[Vec<u8>], sigs: &[Vec<[u8; 64]>]) -> usize {
    let mut good = 0;
    for (g, block) in blocks.iter().enumerate() {
        black_box(me.sign(&what(g, 0), block));
        for (a, sig) in sigs[g].iter().enumerate().skip(1) {
            good += usize::from(authors.verify(&what(g, a), block, sig));
        }
    }
    good
}

fn bench(c: &mut Criterion) {
    let keys: Vec<RowKey> = (0..MEMBERS).map(|_| RowKey::generate().unwrap()).collect();
    let authors = Authors::new(keys.iter().map(RowKey::public).collect());
    let blocks = vec![
        vec![0x11u8; 8 * 36],
        vec![0x22u8; 8 * (2 + 8 + 64)],
        vec![0x33u8; 8 * 16 * 4 * 5],
    ];
    // The other members' signatures, made beforehand: they arrive with their blocks.
    let sigs: Vec<Vec<[u8; 64]>> = blocks
        .iter()
        .enumerate()
        .map(|(g, b)| (0..MEMBERS).map(|a| keys[a].sign(&what(g, a), b)).collect())
        .collect();
    assert_eq!(round(&keys[0], &authors, &blocks, &sigs), 3 * (MEMBERS - 1));
    c.bench_function(
        "signed gathers of one round at 64 members (3 x (1 sign + 63 checks))",
        |b| b.iter(|| round(&keys[0], &authors, black_box(&blocks), &sigs)),
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
