//! The layout of a probe round's gathered row, by wire version, so that members of
//! adjacent releases read each other's timings right (see `docs/upgrades.md`).
//!
//! A row is the f64 values one member contributes to the round's all-gather: the fixed
//! fields ([`ROW_FIXED`] of them, listed there), then one slot per plan pair. At wire
//! version 2 that is all: the reader must know the field count, so a release that adds a
//! field cannot share a group with one that does not. From version 3 the row begins with
//! its own layout, two whole numbers: the row's version and its count of fixed fields.
//! A reader takes the fixed fields it knows, leaves the ones past them (a later release's
//! additions) unread, finds the plan slots after the count the row gives, and reads a
//! field the row lacks as unknown (NaN), never as a value. Which layout a member writes
//! follows the version its communicator agreed on (`Communicator::wire_version`), which
//! every member works out alike, so every row of one all-gather has the same width.

use super::round::ROW_FIXED;

/// The first wire version whose rows say their layout.
pub const LAYOUT_VERSION: u8 = 3;
/// Values before the fixed fields of a row that says its layout: version, field count.
pub const LAYOUT_HEAD: usize = 2;

/// A row whose layout cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum RowError {
    /// The row ends before its layout does.
    #[error("row of {got} values is shorter than its layout ({need} values)")]
    Truncated {
        /// Values the row holds.
        got: usize,
        /// Values its layout needs.
        need: usize,
    },
    /// A layout value is not a whole number in range.
    #[error("row layout {what} is {value}, not a whole number from {min} to 255")]
    Garbage {
        /// Which value: the version or the field count.
        what: &'static str,
        /// The value found.
        value: f64,
        /// The smallest allowed.
        min: u8,
    },
    /// The row says more fixed fields than it holds.
    #[error("row says {fields} fixed fields but holds {room} values after its layout")]
    Oversize {
        /// Fixed fields the row says.
        fields: usize,
        /// Values after the layout.
        room: usize,
    },
}

/// One member's row as written at wire version `version`: `legacy` is the row of version
/// 2 (the fixed fields, then the plan slots), given the layout from version 3 on.
pub fn encode(version: u8, legacy: &[f64]) -> Vec<f64> {
    if version < LAYOUT_VERSION {
        return legacy.to_vec();
    }
    let mut row = Vec::with_capacity(LAYOUT_HEAD + legacy.len());
    row.push(f64::from(LAYOUT_VERSION));
    row.push(ROW_FIXED as f64);
    row.extend_from_slice(legacy);
    row
}

/// A layout value: a whole number from `min` to 255.
fn whole(what: &'static str, value: f64, min: u8) -> Result<u8, RowError> {
    if value.fract() == 0.0 && (f64::from(min)..=255.0).contains(&value) {
        Ok(value as u8)
    } else {
        Err(RowError::Garbage { what, value, min })
    }
}

/// One row of wire version `version` as the row of version 2 this build reads (the fixed
/// fields it knows, NaN for those the row lacks, then the plan slots). Pure and total: a
/// row that cannot be read is an error, never a panic.
pub fn decode(version: u8, row: &[f64]) -> Result<Vec<f64>, RowError> {
    if version < LAYOUT_VERSION {
        return Ok(row.to_vec());
    }
    if row.len() < LAYOUT_HEAD {
        return Err(RowError::Truncated {
            got: row.len(),
            need: LAYOUT_HEAD,
        });
    }
    whole("version", row[0], LAYOUT_VERSION)?;
    let fields = usize::from(whole("field count", row[1], 0)?);
    let body = &row[LAYOUT_HEAD..];
    if fields > body.len() {
        return Err(RowError::Oversize {
            fields,
            room: body.len(),
        });
    }
    let known = fields.min(ROW_FIXED);
    let mut out = Vec::with_capacity(ROW_FIXED + body.len() - fields);
    out.extend_from_slice(&body[..known]);
    out.resize(ROW_FIXED, f64::NAN);
    out.extend_from_slice(&body[fields..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A version-2 row: the eight fixed fields, then two plan slots.
    const LEGACY: [f64; 10] = [0.1, 0.2, 0.3, 0.4, 0.0, 0.0, 0.5, 1.0, 0.6, 0.7];

    fn same(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    #[test]
    fn version_2_rows_are_bare_and_version_3_rows_say_their_layout() {
        assert_eq!(encode(2, &LEGACY), LEGACY);
        let v3 = encode(3, &LEGACY);
        assert_eq!(v3[..2], [3.0, 8.0]);
        assert_eq!(v3[2..], LEGACY);
        assert_eq!(decode(2, &LEGACY).unwrap(), LEGACY);
        assert_eq!(decode(3, &v3).unwrap(), LEGACY);
    }

    #[test]
    fn a_later_row_s_extra_fields_are_skipped_and_missing_ones_are_unknown() {
        // A later release's row: version 4, ten fixed fields (two this build does not
        // know), then the same two plan slots.
        let mut later = vec![4.0, 10.0];
        later.extend_from_slice(&LEGACY[..8]);
        later.extend_from_slice(&[42.0, 43.0]);
        later.extend_from_slice(&LEGACY[8..]);
        assert_eq!(decode(3, &later).unwrap(), LEGACY);
        // A row with six fixed fields: the last two read as unknown, the slots still found.
        let mut short = vec![3.0, 6.0];
        short.extend_from_slice(&LEGACY[..6]);
        short.extend_from_slice(&LEGACY[8..]);
        let got = decode(3, &short).unwrap();
        let mut want = LEGACY.to_vec();
        want[6] = f64::NAN;
        want[7] = f64::NAN;
        assert!(same(&got, &want), "{got:?}");
    }

    #[test]
    fn unreadable_layouts_are_typed_errors() {
        assert_eq!(
            decode(3, &[3.0]),
            Err(RowError::Truncated { got: 1, need: 2 })
        );
        assert_eq!(
            decode(3, &[3.0, 9.0, 0.0, 0.0]),
            Err(RowError::Oversize { fields: 9, room: 2 })
        );
        for (row, what) in [
            (vec![2.0, 8.0], "version"),
            (vec![f64::NAN, 8.0], "version"),
            (vec![3.5, 8.0], "version"),
            (vec![256.0, 8.0], "version"),
            (vec![3.0, -1.0], "field count"),
            (vec![3.0, f64::INFINITY], "field count"),
        ] {
            match decode(3, &row) {
                Err(RowError::Garbage { what: w, .. }) => assert_eq!(w, what, "{row:?}"),
                other => panic!("{row:?}: {other:?}"),
            }
        }
        assert!(
            decode(3, &[3.0, 9.0])
                .unwrap_err()
                .to_string()
                .contains("says 9 fixed fields but holds 0")
        );
    }

    proptest! {
        #[test]
        fn any_row_decodes_or_errs_and_a_written_row_reads_back(
            row in proptest::collection::vec(any::<f64>(), 0..40),
            version in 2u8..=4,
        ) {
            if let Ok(r) = decode(version, &row) {
                // Whatever decodes has the fixed fields this build knows.
                prop_assert!(r.len() >= ROW_FIXED.min(row.len()));
            }
            if row.len() >= ROW_FIXED {
                prop_assert!(same(&decode(version, &encode(version, &row)).unwrap(), &row));
            }
        }
    }
}
