//! Element types and reduction operators, numbered as HCCL numbers them.
//!
//! Buffers are plain bytes (as in HCCL's C API); a [`DataType`] says how to read them.
//! Reductions decode native-endian elements, combine, and encode back. Integer sums and
//! products wrap, as they do in two's-complement hardware; fp16 and bf16 are computed in
//! f32 and rounded to nearest on store, which is what HCCL's AI-core kernels do.

use half::{bf16, f16};

/// `HcclDataType`. The numeric codes are HCCL's (`hccl_types.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DataType {
    /// `HCCL_DATA_TYPE_INT8` (0).
    Int8 = 0,
    /// `HCCL_DATA_TYPE_INT16` (1).
    Int16 = 1,
    /// `HCCL_DATA_TYPE_INT32` (2).
    Int32 = 2,
    /// `HCCL_DATA_TYPE_FP16` (3).
    Fp16 = 3,
    /// `HCCL_DATA_TYPE_FP32` (4).
    Fp32 = 4,
    /// `HCCL_DATA_TYPE_INT64` (5).
    Int64 = 5,
    /// `HCCL_DATA_TYPE_UINT64` (6).
    Uint64 = 6,
    /// `HCCL_DATA_TYPE_UINT8` (7).
    Uint8 = 7,
    /// `HCCL_DATA_TYPE_UINT16` (8).
    Uint16 = 8,
    /// `HCCL_DATA_TYPE_UINT32` (9).
    Uint32 = 9,
    /// `HCCL_DATA_TYPE_FP64` (10).
    Fp64 = 10,
    /// `HCCL_DATA_TYPE_BFP16` (11).
    Bf16 = 11,
}

impl DataType {
    /// Every supported type.
    pub const ALL: [DataType; 12] = [
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Fp16,
        DataType::Bf16,
        DataType::Fp32,
        DataType::Fp64,
    ];

    /// The HCCL code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// From an HCCL code; `None` for codes this engine does not implement (e.g. int128,
    /// fp8), which callers turn into `HCCL_E_PARA`.
    pub fn from_code(code: u8) -> Option<Self> {
        DataType::ALL.into_iter().find(|d| d.code() == code)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 => 1,
            DataType::Int16 | DataType::Uint16 | DataType::Fp16 | DataType::Bf16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Fp32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Fp64 => 8,
        }
    }

    /// hccl_test's name (`-d`).
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Int16 => "int16",
            DataType::Int32 => "int32",
            DataType::Int64 => "int64",
            DataType::Uint8 => "uint8",
            DataType::Uint16 => "uint16",
            DataType::Uint32 => "uint32",
            DataType::Uint64 => "uint64",
            DataType::Fp16 => "fp16",
            DataType::Bf16 => "bfp16",
            DataType::Fp32 => "fp32",
            DataType::Fp64 => "fp64",
        }
    }

    /// Parses hccl_test and nccl-tests spellings (`fp32`/`float`, `bfp16`/`bf16`, …).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "int8" | "char" => DataType::Int8,
            "int16" => DataType::Int16,
            "int32" | "int" => DataType::Int32,
            "int64" => DataType::Int64,
            "uint8" => DataType::Uint8,
            "uint16" => DataType::Uint16,
            "uint32" => DataType::Uint32,
            "uint64" => DataType::Uint64,
            "fp16" | "half" | "float16" => DataType::Fp16,
            "bfp16" | "bf16" | "bfloat16" => DataType::Bf16,
            "fp32" | "float" | "float32" => DataType::Fp32,
            "fp64" | "double" | "float64" => DataType::Fp64,
            _ => return None,
        })
    }

    /// Whether the type is floating point.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Fp16 | DataType::Bf16 | DataType::Fp32 | DataType::Fp64
        )
    }

    /// Relative tolerance for comparing a reduction of `terms` values against an exact
    /// reference: one rounding per term at the format's unit roundoff.
    pub fn tolerance(self, terms: usize) -> f64 {
        let eps = match self {
            DataType::Fp16 => 2f64.powi(-11),
            DataType::Bf16 => 2f64.powi(-8),
            DataType::Fp32 => 2f64.powi(-24),
            DataType::Fp64 => 2f64.powi(-53),
            _ => 0.0,
        };
        eps * (terms.max(1) as f64) * 2.0
    }

    /// Reads element `i` as f64 (exact for every integer type up to 2^53).
    pub fn get(self, buf: &[u8], i: usize) -> f64 {
        let s = self.size();
        let b = &buf[i * s..(i + 1) * s];
        match self {
            DataType::Int8 => f64::from(b[0] as i8),
            DataType::Uint8 => f64::from(b[0]),
            DataType::Int16 => f64::from(i16::from_ne_bytes([b[0], b[1]])),
            DataType::Uint16 => f64::from(u16::from_ne_bytes([b[0], b[1]])),
            DataType::Fp16 => f16::from_ne_bytes([b[0], b[1]]).to_f64(),
            DataType::Bf16 => bf16::from_ne_bytes([b[0], b[1]]).to_f64(),
            DataType::Int32 => f64::from(i32::from_ne_bytes(b.try_into().unwrap_or_default())),
            DataType::Uint32 => f64::from(u32::from_ne_bytes(b.try_into().unwrap_or_default())),
            DataType::Fp32 => f64::from(f32::from_ne_bytes(b.try_into().unwrap_or_default())),
            DataType::Int64 => i64::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
            DataType::Uint64 => u64::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
            DataType::Fp64 => f64::from_ne_bytes(b.try_into().unwrap_or_default()),
        }
    }

    /// Writes `v` as element `i` (integers truncate toward zero and wrap).
    pub fn set(self, buf: &mut [u8], i: usize, v: f64) {
        let s = self.size();
        let b = &mut buf[i * s..(i + 1) * s];
        match self {
            DataType::Int8 => b.copy_from_slice(&(v as i64 as i8).to_ne_bytes()),
            DataType::Uint8 => b.copy_from_slice(&(v as i64 as u8).to_ne_bytes()),
            DataType::Int16 => b.copy_from_slice(&(v as i64 as i16).to_ne_bytes()),
            DataType::Uint16 => b.copy_from_slice(&(v as i64 as u16).to_ne_bytes()),
            DataType::Fp16 => b.copy_from_slice(&f16::from_f64(v).to_ne_bytes()),
            DataType::Bf16 => b.copy_from_slice(&bf16::from_f64(v).to_ne_bytes()),
            DataType::Int32 => b.copy_from_slice(&(v as i64 as i32).to_ne_bytes()),
            DataType::Uint32 => b.copy_from_slice(&(v as i64 as u32).to_ne_bytes()),
            DataType::Fp32 => b.copy_from_slice(&(v as f32).to_ne_bytes()),
            DataType::Int64 => b.copy_from_slice(&(v as i64).to_ne_bytes()),
            DataType::Uint64 => b.copy_from_slice(&(v as u64).to_ne_bytes()),
            DataType::Fp64 => b.copy_from_slice(&v.to_ne_bytes()),
        }
    }
}

/// `HcclReduceOp`. There is no average in HCCL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReduceOp {
    /// `HCCL_REDUCE_SUM` (0).
    Sum = 0,
    /// `HCCL_REDUCE_PROD` (1).
    Prod = 1,
    /// `HCCL_REDUCE_MAX` (2).
    Max = 2,
    /// `HCCL_REDUCE_MIN` (3).
    Min = 3,
}

impl ReduceOp {
    /// Every operator.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];

    /// The HCCL code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// From an HCCL code.
    pub fn from_code(c: u8) -> Option<Self> {
        ReduceOp::ALL.into_iter().find(|o| o.code() == c)
    }

    /// nccl-tests / hccl_test name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }

    /// Parses `sum`, `prod`, `max`, `min`.
    pub fn parse(s: &str) -> Option<Self> {
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name() == s.to_ascii_lowercase())
    }

    /// Applies the operator to two f64 values (the reference the tests compare with).
    pub fn apply_f64(self, a: f64, b: f64) -> f64 {
        match self {
            ReduceOp::Sum => a + b,
            ReduceOp::Prod => a * b,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
}

/// Where a reduction reads and writes: `acc = op(acc, src)` in place, or
/// `dst = op(own, other)` into a third buffer. The second form saves a copy of `own`
/// into `dst` followed by a second pass over it, which for an out-of-place all-reduce is
/// one pass over every byte this rank owns.
enum Operands<'a> {
    InPlace(&'a mut [u8], &'a [u8]),
    Apart(&'a mut [u8], &'a [u8], &'a [u8]),
}

/// The element loop, in place. The slices arrive as separate reference parameters on
/// purpose: only then does the compiler know they do not overlap and vectorise the loop
/// (taken out of an enum in the caller, the same loop ran at a third of the speed).
fn fold_in_place<const N: usize, T>(
    acc: &mut [u8],
    src: &[u8],
    load: impl Fn([u8; N]) -> T,
    store: impl Fn(T) -> [u8; N],
    f: impl Fn(T, T) -> T,
) {
    let (acc, _) = acc.as_chunks_mut::<N>();
    let (src, _) = src.as_chunks::<N>();
    for (a, b) in acc.iter_mut().zip(src) {
        *a = store(f(load(*a), load(*b)));
    }
}

/// The element loop into a third buffer; see [`fold_in_place`].
fn fold_apart<const N: usize, T>(
    dst: &mut [u8],
    own: &[u8],
    other: &[u8],
    load: impl Fn([u8; N]) -> T,
    store: impl Fn(T) -> [u8; N],
    f: impl Fn(T, T) -> T,
) {
    let (dst, _) = dst.as_chunks_mut::<N>();
    let (own, _) = own.as_chunks::<N>();
    let (other, _) = other.as_chunks::<N>();
    for ((d, a), b) in dst.iter_mut().zip(own).zip(other) {
        *d = store(f(load(*a), load(*b)));
    }
}

/// One monomorphic loop per (type, operator, operand form): the operator is a closure
/// inlined into the loop, so LLVM vectorises it (a function pointer here costs an
/// indirect call per element, which profiling showed as a quarter of an all-reduce's
/// CPU time). `$load`/`$store` convert an element from and to its bytes.
macro_rules! lanes {
    ($args:expr, $load:expr, $store:expr, $f:expr) => {{
        match $args {
            Operands::InPlace(acc, src) => fold_in_place(acc, src, $load, $store, $f),
            Operands::Apart(dst, own, other) => fold_apart(dst, own, other, $load, $store, $f),
        }
    }};
}

macro_rules! reduce_native {
    ($t:ty, $args:expr, $op:expr, $sum:expr, $prod:expr) => {{
        let load = <$t>::from_ne_bytes;
        let store = <$t>::to_ne_bytes;
        match $op {
            ReduceOp::Sum => lanes!($args, load, store, $sum),
            ReduceOp::Prod => lanes!($args, load, store, $prod),
            ReduceOp::Max => lanes!($args, load, store, |a: $t, b: $t| if b > a { b } else { a }),
            ReduceOp::Min => lanes!($args, load, store, |a: $t, b: $t| if b < a { b } else { a }),
        }
    }};
}

/// The 16-bit floats reduce in f64 and round once to f32 and then to the format, as the
/// reference does.
macro_rules! reduce_half {
    ($t:ty, $args:expr, $op:expr) => {{
        let load = |b: [u8; 2]| <$t>::from_ne_bytes(b).to_f32();
        let store = |v: f32| <$t>::from_f32(v).to_ne_bytes();
        let op = $op;
        lanes!(
            $args,
            load,
            store,
            |x: f32, y: f32| op.apply_f64(x.into(), y.into()) as f32
        )
    }};
}

fn reduce(op: ReduceOp, dtype: DataType, args: Operands<'_>) {
    match dtype {
        DataType::Int8 => reduce_native!(i8, args, op, i8::wrapping_add, i8::wrapping_mul),
        DataType::Uint8 => reduce_native!(u8, args, op, u8::wrapping_add, u8::wrapping_mul),
        DataType::Int16 => {
            reduce_native!(i16, args, op, i16::wrapping_add, i16::wrapping_mul)
        }
        DataType::Uint16 => {
            reduce_native!(u16, args, op, u16::wrapping_add, u16::wrapping_mul)
        }
        DataType::Int32 => {
            reduce_native!(i32, args, op, i32::wrapping_add, i32::wrapping_mul)
        }
        DataType::Uint32 => {
            reduce_native!(u32, args, op, u32::wrapping_add, u32::wrapping_mul)
        }
        DataType::Int64 => {
            reduce_native!(i64, args, op, i64::wrapping_add, i64::wrapping_mul)
        }
        DataType::Uint64 => {
            reduce_native!(u64, args, op, u64::wrapping_add, u64::wrapping_mul)
        }
        DataType::Fp32 => {
            reduce_native!(f32, args, op, |a: f32, b: f32| a + b, |a: f32, b: f32| a
                * b)
        }
        DataType::Fp64 => {
            reduce_native!(f64, args, op, |a: f64, b: f64| a + b, |a: f64, b: f64| a
                * b)
        }
        DataType::Fp16 => reduce_half!(f16, args, op),
        DataType::Bf16 => reduce_half!(bf16, args, op),
    }
}

/// `acc[i] = op(acc[i], src[i])` for every element. Both slices must hold the same
/// whole number of elements (callers validate lengths before any data moves).
pub fn reduce_into(op: ReduceOp, dtype: DataType, acc: &mut [u8], src: &[u8]) {
    debug_assert_eq!(acc.len(), src.len());
    reduce(op, dtype, Operands::InPlace(acc, src));
}

/// `dst[i] = op(own[i], other[i])` for every element, with the same operand order as
/// [`reduce_into`] on a copy of `own`, so both give bit-identical results (NaN and
/// signed zeros included). All three slices must hold the same whole number of elements.
pub fn reduce_apart(op: ReduceOp, dtype: DataType, dst: &mut [u8], own: &[u8], other: &[u8]) {
    debug_assert!(dst.len() == own.len() && own.len() == other.len());
    reduce(op, dtype, Operands::Apart(dst, own, other));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hccl_codes() {
        assert_eq!(DataType::Fp16.code(), 3);
        assert_eq!(DataType::Bf16.code(), 11);
        assert_eq!(DataType::Uint64.code(), 6);
        assert_eq!(DataType::from_code(12), None, "int128 is not implemented");
        assert_eq!(DataType::from_code(255), None);
        assert_eq!(ReduceOp::Min.code(), 3);
        assert_eq!(ReduceOp::from_code(4), None);
        for d in DataType::ALL {
            assert_eq!(DataType::from_code(d.code()), Some(d));
            assert_eq!(DataType::parse(d.name()), Some(d));
        }
    }

    #[test]
    fn reductions_per_type() {
        for d in DataType::ALL {
            for op in ReduceOp::ALL {
                let n = 5;
                let mut a = vec![0u8; n * d.size()];
                let mut b = vec![0u8; n * d.size()];
                for i in 0..n {
                    d.set(&mut a, i, (i as f64) + 1.0);
                    d.set(
                        &mut b,
                        i,
                        3.0 - i as f64 * 0.5 + if d.is_float() { 0.0 } else { 0.5 },
                    );
                }
                let expect: Vec<f64> = (0..n)
                    .map(|i| op.apply_f64(d.get(&a, i), d.get(&b, i)))
                    .collect();
                reduce_into(op, d, &mut a, &b);
                for (i, e) in expect.iter().enumerate() {
                    let mut tmp = vec![0u8; d.size()];
                    d.set(&mut tmp, 0, *e);
                    assert_eq!(d.get(&a, i), d.get(&tmp, 0), "{d:?} {op:?} element {i}");
                }
            }
        }
    }

    /// The three-operand form gives the bytes of a copy followed by the in-place form, for
    /// every type and operator, NaN, infinities and signed zeros included (max and min of
    /// such pairs depend on operand order), and leaves its inputs alone.
    #[test]
    fn apart_equals_copy_then_in_place() {
        let special = [0.0, -0.0, f64::NAN, f64::INFINITY, -1.5, 2.0, 1e30, -7.0];
        for d in DataType::ALL {
            for op in ReduceOp::ALL {
                let n = 2 * special.len() * special.len() + 5;
                let mut own = vec![0u8; n * d.size()];
                let mut other = vec![0u8; n * d.size()];
                for i in 0..n {
                    let (a, b) = if i < 2 * special.len() * special.len() {
                        let k = i % (special.len() * special.len());
                        (special[k / special.len()], special[k % special.len()])
                    } else {
                        (i as f64, 3.0 - i as f64)
                    };
                    d.set(&mut own, i, a);
                    d.set(&mut other, i, b);
                }
                let (own0, other0) = (own.clone(), other.clone());
                let mut want = own.clone();
                reduce_into(op, d, &mut want, &other);
                let mut got = vec![0xA5u8; own.len()];
                reduce_apart(op, d, &mut got, &own, &other);
                assert_eq!(got, want, "{d:?} {op:?}");
                assert_eq!((own, other), (own0, other0), "{d:?} {op:?}: inputs changed");
            }
        }
    }

    #[test]
    fn integer_sum_wraps() {
        let mut a = 250u8.to_ne_bytes().to_vec();
        reduce_into(ReduceOp::Sum, DataType::Uint8, &mut a, &10u8.to_ne_bytes());
        assert_eq!(a, 4u8.to_ne_bytes());
    }
}
