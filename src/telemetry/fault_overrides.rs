//! Per-code overrides in the fault-level file, and the per-chip state that applies them.
//!
//! MindCluster's `faultCode.json` says only which level a code has. An SRE also needs to
//! say, for a few codes, "this one is worse (or milder) here", "this one flickers: count it
//! only when it stays", and "this one comes and goes: keep its effect for a while after
//! it stops". They go in the same file, under one extra top-level key,
//! [`OVERRIDES_KEY`]:
//!
//! ```json
//! { "SeparateNPUCodes": ["80E3A201"],
//!   "hcclwatch_overrides": {
//!     "80E01801": {"level": "SeparateNPU", "consecutive_reads": 3, "clear_after": "10m"} } }
//! ```
//!
//! The key is one MindCluster's device plugin ignores: it decodes the file into a Go
//! struct of the level lists with `encoding/json`, which skips keys that match no field
//! (case-insensitively), so the same file still serves both. Every part is validated and
//! a bad one rejects the whole file with the file, the key path and the code named, as
//! the level lists are.
//!
//! [`FaultDebounce`] applies `consecutive_reads` and `clear_after` where the DCMI source
//! turns codes into faults, so the snapshot, the hard faults and the exporters all see the
//! same thing. `consecutive_reads` counts reads, whatever their spacing; `clear_after` is
//! measured on the monotonic clock the caller passes in, so tests need no sleeps.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::snapshot::npu::{Fault, FaultState};

use super::faults::FaultTableError;

/// The top-level key of the overrides in a fault-level file.
pub const OVERRIDES_KEY: &str = "hcclwatch_overrides";

/// The keys one code's override may have.
pub const OVERRIDE_FIELDS: &[&str] = &["level", "consecutive_reads", "clear_after"];

/// What the file says about one code beyond its level list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeOverride {
    /// The level the code gets instead of the table's (or its event severity's).
    pub level: Option<crate::snapshot::npu::FaultLevel>,
    /// Health reads in a row that must list the code before it counts (at least 1).
    pub consecutive_reads: u32,
    /// How long its effect stays after the code is no longer read (none: it ends at once).
    pub clear_after: Option<Duration>,
}

impl Default for CodeOverride {
    fn default() -> Self {
        Self {
            level: None,
            consecutive_reads: 1,
            clear_after: None,
        }
    }
}

/// A fault code as an override names it: hex digits, `0x` optional, that fit 32 bits
/// (DCMI event ids are `unsigned int`).
fn parse_u32_code(s: &str) -> Option<u32> {
    let hex = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if hex.is_empty() || hex.len() > 8 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(hex, 16).ok()
}

/// Parses the value of [`OVERRIDES_KEY`]; `origin` names the file in errors.
pub fn parse_overrides(
    value: &serde_json::Value,
    origin: &str,
) -> Result<HashMap<u32, CodeOverride>, FaultTableError> {
    let bad = |key: String, code: &str, reason: String| FaultTableError::Override {
        origin: origin.to_string(),
        key,
        code: code.to_string(),
        reason,
    };
    let map = value.as_object().ok_or_else(|| {
        bad(
            OVERRIDES_KEY.to_string(),
            "",
            "must be an object of fault code to override".to_string(),
        )
    })?;
    let mut out = HashMap::with_capacity(map.len());
    for (code_text, entry) in map {
        let path = format!("{OVERRIDES_KEY}.{code_text}");
        let code = parse_u32_code(code_text).ok_or_else(|| {
            bad(
                path.clone(),
                code_text,
                "not a fault code (1 to 8 hex digits, 0x optional)".to_string(),
            )
        })?;
        let fields = entry.as_object().ok_or_else(|| {
            bad(
                path.clone(),
                code_text,
                format!(
                    "must be an object with any of {}",
                    OVERRIDE_FIELDS.join(", ")
                ),
            )
        })?;
        let mut o = CodeOverride::default();
        for (field, v) in fields {
            let key = format!("{path}.{field}");
            match field.as_str() {
                "level" => o.level = Some(parse_level(v).map_err(|r| bad(key, code_text, r))?),
                "consecutive_reads" => {
                    o.consecutive_reads = match v.as_u64() {
                        Some(0) => {
                            Err("must be at least 1 (1: the code counts when first read)"
                                .to_string())
                        }
                        Some(n) => u32::try_from(n).map_err(|_| format!("{n} is too large")),
                        None => Err(format!("{v} is not a whole number of reads")),
                    }
                    .map_err(|r| bad(key, code_text, r))?;
                }
                "clear_after" => {
                    let d = v
                        .as_str()
                        .ok_or_else(|| format!("{v} is not a duration string such as \"10m\""))
                        .and_then(|s| crate::config::duration::parse(s).map_err(|e| e.to_string()))
                        .map_err(|r| bad(key, code_text, r))?;
                    o.clear_after = Some(d);
                }
                _ => {
                    return Err(bad(
                        key,
                        code_text,
                        format!(
                            "unknown key; expected one of {}",
                            OVERRIDE_FIELDS.join(", ")
                        ),
                    ));
                }
            }
        }
        if out.insert(code, o).is_some() {
            return Err(bad(
                path,
                code_text,
                format!("code 0x{code:08X} is overridden twice"),
            ));
        }
    }
    Ok(out)
}

fn parse_level(v: &serde_json::Value) -> Result<crate::snapshot::npu::FaultLevel, String> {
    use crate::snapshot::npu::FaultLevel;
    let names = || {
        FaultLevel::ALL
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let s = v
        .as_str()
        .ok_or_else(|| format!("{v} is not a level name; expected one of {}", names()))?;
    FaultLevel::ALL
        .into_iter()
        .find(|l| l.as_str() == s)
        .ok_or_else(|| format!("{s:?} is not a level; expected one of {}", names()))
}

/// What one chip's reads have shown of one code.
#[derive(Debug, Clone)]
struct Seen {
    /// Reads in a row that listed it (0 once it is gone).
    reads: u32,
    /// When it was last read, and as what.
    last: Instant,
    fault: Fault,
    /// Whether it had counted (reached its `consecutive_reads`) before it went.
    counted: bool,
}

/// `consecutive_reads` and `clear_after` applied to each chip's fault reads. One per
/// source; each successful fault-code read of a chip goes through [`Self::apply`]. A
/// failed read does not go through it: it neither counts nor clears anything.
#[derive(Debug, Default)]
pub struct FaultDebounce {
    chips: BTreeMap<u32, HashMap<u32, Seen>>,
}

impl FaultDebounce {
    /// The faults of chip `phy` as reported, given the codes just `read` (each with its
    /// level already overridden), the overrides in force and the time of the read:
    /// - a code read fewer than its `consecutive_reads` times in a row is
    ///   [`FaultState::Pending`];
    /// - a code that counted and is no longer read is kept, [`FaultState::Held`], until
    ///   its `clear_after` has passed since it was last read;
    /// - everything else is [`FaultState::Counted`], as without overrides.
    pub fn apply(
        &mut self,
        phy: u32,
        read: Vec<Fault>,
        overrides: &HashMap<u32, CodeOverride>,
        now: Instant,
    ) -> Vec<Fault> {
        let seen = self.chips.entry(phy).or_default();
        let rule = |code: u32| overrides.get(&code).copied().unwrap_or_default();
        let mut out = Vec::with_capacity(read.len());
        for mut f in read {
            let needed = rule(f.code).consecutive_reads;
            let s = seen.entry(f.code).or_insert_with(|| Seen {
                reads: 0,
                last: now,
                fault: f.clone(),
                counted: false,
            });
            // A code that counts goes on counting while it is read (a reload that raises
            // its `consecutive_reads` does not take its effect away), and one read again
            // while its effect is held counts at once: for both, the effect never stopped.
            let hold = rule(f.code).clear_after.unwrap_or(Duration::ZERO);
            let held = s.reads == 0 && now.saturating_duration_since(s.last) < hold;
            let kept = s.counted && (s.reads > 0 || held);
            s.reads = s.reads.saturating_add(1);
            s.last = now;
            s.counted = kept || s.reads >= needed;
            f.state = if s.counted {
                FaultState::Counted
            } else {
                FaultState::Pending {
                    reads: s.reads,
                    needed,
                }
            };
            s.fault = f.clone();
            out.push(f);
        }
        let listed: Vec<u32> = out.iter().map(|f| f.code).collect();
        seen.retain(|code, s| {
            if listed.contains(code) {
                return true;
            }
            s.reads = 0;
            let hold = rule(*code).clear_after.unwrap_or(Duration::ZERO);
            s.counted && now.saturating_duration_since(s.last) < hold
        });
        let mut held: Vec<Fault> = seen
            .iter()
            .filter(|(code, _)| !listed.contains(code))
            .map(|(_, s)| Fault {
                state: FaultState::Held,
                ..s.fault.clone()
            })
            .collect();
        held.sort_by_key(|f| f.code);
        out.extend(held);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::npu::{FaultLevel, LevelSource};
    use crate::telemetry::faults::FaultTable;

    fn err(doc: &str) -> String {
        FaultTable::parse(doc, "/etc/fc.json")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn overrides_parse_with_their_defaults() {
        let t = FaultTable::parse(
            r#"{"RestartBusinessCodes":["80E01801"],
                "hcclwatch_overrides":{
                  "0x80E01801":{"level":"SeparateNPU","consecutive_reads":3,"clear_after":"10m"},
                  "80e18005":{"clear_after":"1m30s"},
                  "1":{}}}"#,
            "f",
        )
        .unwrap();
        let o = t.overrides();
        assert_eq!(
            o[&0x80E0_1801],
            CodeOverride {
                level: Some(FaultLevel::SeparateNPU),
                consecutive_reads: 3,
                clear_after: Some(Duration::from_secs(600)),
            }
        );
        assert_eq!(
            o[&0x80E1_8005],
            CodeOverride {
                level: None,
                consecutive_reads: 1,
                clear_after: Some(Duration::from_secs(90)),
            }
        );
        assert_eq!(o[&1], CodeOverride::default());
        // The level list itself is unchanged; the override decides the level.
        assert_eq!(t.len(), 1);
        assert_eq!(t.level(0x80E0_1801), Some(FaultLevel::SeparateNPU));
        assert_eq!(
            t.listed_level(0x80E0_1801),
            Some(FaultLevel::RestartBusiness)
        );
        // An override's level applies to a code the lists lack, too.
        assert_eq!(t.level(1), None);
    }

    #[test]
    fn bad_overrides_name_the_file_the_key_path_and_the_code() {
        let cases: &[(&str, &[&str])] = &[
            (
                r#"{"hcclwatch_overrides":{"80E01801":{"level":"Separate"}}}"#,
                &[
                    "hcclwatch_overrides.80E01801.level",
                    "code 80E01801",
                    "\"Separate\" is not a level",
                    "SeparateNPU",
                ],
            ),
            (
                r#"{"hcclwatch_overrides":{"80E01801":{"level":3}}}"#,
                &[
                    "hcclwatch_overrides.80E01801.level",
                    "3 is not a level name",
                ],
            ),
            (
                r#"{"hcclwatch_overrides":{"80E01801":{"clear_after":"10 min"}}}"#,
                &[
                    "hcclwatch_overrides.80E01801.clear_after",
                    "code 80E01801",
                    "\"10 min\"",
                ],
            ),
            (
                r#"{"hcclwatch_overrides":{"80E01801":{"clear_after":600}}}"#,
                &[
                    "hcclwatch_overrides.80E01801.clear_after",
                    "600 is not a duration",
                ],
            ),
            (
                r#"{"hcclwatch_overrides":{"80E01801":{"consecutive_reads":0}}}"#,
                &[
                    "hcclwatch_overrides.80E01801.consecutive_reads",
                    "code 80E01801",
                    "at least 1",
                ],
            ),
            (
                r#"{"hcclwatch_overrides":{"80E01801":{"consecutive_reads":-2}}}"#,
                &["consecutive_reads", "-2 is not a whole number"],
            ),
            (
                r#"{"hcclwatch_overrides":{"80E01801":{"consecutive_reads":4294967296}}}"#,
                &["consecutive_reads", "too large"],
            ),
            (
                r#"{"hcclwatch_overrides":{"80E01801":{"clearAfter":"1m"}}}"#,
                &[
                    "hcclwatch_overrides.80E01801.clearAfter",
                    "code 80E01801",
                    "unknown key",
                    "clear_after",
                ],
            ),
            (
                r#"{"hcclwatch_overrides":{"80G01801":{}}}"#,
                &[
                    "hcclwatch_overrides.80G01801",
                    "code 80G01801",
                    "not a fault code",
                ],
            ),
            (
                r#"{"hcclwatch_overrides":{"180E01801":{}}}"#,
                &["code 180E01801", "not a fault code"],
            ),
            (
                r#"{"hcclwatch_overrides":{"0x":{}}}"#,
                &["code 0x", "not a fault code"],
            ),
            (
                r#"{"hcclwatch_overrides":{"80E01801":"SeparateNPU"}}"#,
                &["hcclwatch_overrides.80E01801", "must be an object"],
            ),
            (
                r#"{"hcclwatch_overrides":{"80E01801":{},"0x80e01801":{}}}"#,
                &["code 0x80E01801 is overridden twice"],
            ),
            (
                r#"{"hcclwatch_overrides":["80E01801"]}"#,
                &["key \"hcclwatch_overrides\"", "must be an object"],
            ),
        ];
        for (doc, wants) in cases {
            let e = err(doc);
            assert!(e.contains("/etc/fc.json"), "{doc}: {e}");
            for w in *wants {
                assert!(e.contains(w), "{doc}: wanted {w:?} in: {e}");
            }
        }
    }

    fn fault(code: u32) -> Fault {
        Fault {
            code,
            level: FaultLevel::SeparateNPU,
            source: LevelSource::Table,
            description: None,
            state: FaultState::Counted,
        }
    }

    fn states(out: &[Fault]) -> Vec<(u32, FaultState)> {
        out.iter().map(|f| (f.code, f.state)).collect()
    }

    fn rules(code: u32, reads: u32, clear_after: Option<Duration>) -> HashMap<u32, CodeOverride> {
        HashMap::from([(
            code,
            CodeOverride {
                level: None,
                consecutive_reads: reads,
                clear_after,
            },
        )])
    }

    #[test]
    fn without_overrides_a_code_counts_when_read_and_ends_when_gone() {
        let mut d = FaultDebounce::default();
        let t0 = Instant::now();
        let none = HashMap::new();
        assert_eq!(
            states(&d.apply(0, vec![fault(7)], &none, t0)),
            [(7, FaultState::Counted)]
        );
        assert!(
            d.apply(0, vec![], &none, t0 + Duration::from_secs(1))
                .is_empty()
        );
    }

    #[test]
    fn a_code_counts_only_after_its_consecutive_reads() {
        let mut d = FaultDebounce::default();
        let t0 = Instant::now();
        let r = rules(7, 3, None);
        let at = |s: u64| t0 + Duration::from_secs(5 * s);
        let pending = |reads| FaultState::Pending { reads, needed: 3 };
        assert_eq!(
            states(&d.apply(0, vec![fault(7)], &r, at(0))),
            [(7, pending(1))]
        );
        assert_eq!(
            states(&d.apply(0, vec![fault(7)], &r, at(1))),
            [(7, pending(2))]
        );
        // A read without it starts the count again.
        assert!(d.apply(0, vec![], &r, at(2)).is_empty());
        assert_eq!(
            states(&d.apply(0, vec![fault(7)], &r, at(3))),
            [(7, pending(1))]
        );
        assert_eq!(
            states(&d.apply(0, vec![fault(7)], &r, at(4))),
            [(7, pending(2))]
        );
        assert_eq!(
            states(&d.apply(0, vec![fault(7)], &r, at(5))),
            [(7, FaultState::Counted)]
        );
        // Another chip's reads are its own.
        assert_eq!(
            states(&d.apply(1, vec![fault(7)], &r, at(5))),
            [(7, pending(1))]
        );
        // Other codes are not delayed.
        assert_eq!(
            states(&d.apply(0, vec![fault(7), fault(8)], &r, at(6))),
            [(7, FaultState::Counted), (8, FaultState::Counted)]
        );
    }

    #[test]
    fn a_counted_code_is_held_for_its_clear_after() {
        let mut d = FaultDebounce::default();
        let t0 = Instant::now();
        let r = rules(7, 1, Some(Duration::from_secs(600)));
        let last = t0 + Duration::from_secs(5);
        d.apply(0, vec![fault(7)], &r, t0);
        d.apply(0, vec![fault(7)], &r, last);
        for s in [1, 300, 599] {
            let out = d.apply(0, vec![], &r, last + Duration::from_secs(s));
            assert_eq!(states(&out), [(7, FaultState::Held)], "{s} s after");
            assert_eq!(out[0].level, FaultLevel::SeparateNPU);
        }
        assert!(
            d.apply(0, vec![], &r, last + Duration::from_secs(600))
                .is_empty()
        );
        // Gone for good: it does not come back by itself.
        assert!(
            d.apply(0, vec![], &r, last + Duration::from_secs(601))
                .is_empty()
        );
    }

    #[test]
    fn a_code_read_again_while_held_counts_again_and_restarts_the_hold() {
        let mut d = FaultDebounce::default();
        let t0 = Instant::now();
        let r = rules(7, 3, Some(Duration::from_secs(60)));
        let s = |n: u64| t0 + Duration::from_secs(n);
        for n in 0..3 {
            d.apply(0, vec![fault(7)], &r, s(n));
        }
        let held = d.apply(0, vec![], &r, s(30));
        assert_eq!(states(&held), [(7, FaultState::Held)]);
        // Not pending again: its effect never stopped.
        let again = d.apply(0, vec![fault(7)], &r, s(40));
        assert_eq!(states(&again), [(7, FaultState::Counted)]);
        let held = d.apply(0, vec![], &r, s(99));
        assert_eq!(states(&held), [(7, FaultState::Held)]);
        assert!(d.apply(0, vec![], &r, s(100)).is_empty());
        // Released: back to counting its reads.
        let first = d.apply(0, vec![fault(7)], &r, s(101));
        let pending = FaultState::Pending {
            reads: 1,
            needed: 3,
        };
        assert_eq!(states(&first), [(7, pending)]);
    }

    #[test]
    fn a_code_that_never_counted_is_not_held() {
        let mut d = FaultDebounce::default();
        let t0 = Instant::now();
        let r = rules(7, 3, Some(Duration::from_secs(600)));
        d.apply(0, vec![fault(7)], &r, t0);
        d.apply(0, vec![fault(7)], &r, t0 + Duration::from_secs(5));
        assert!(
            d.apply(0, vec![], &r, t0 + Duration::from_secs(10))
                .is_empty()
        );
    }

    #[test]
    fn a_reload_changes_consecutive_reads_without_taking_away_an_effect() {
        let mut d = FaultDebounce::default();
        let t0 = Instant::now();
        let at = |n: u64| t0 + Duration::from_secs(5 * n);
        let two = rules(7, 2, None);
        let five = rules(7, 5, None);
        d.apply(0, vec![fault(7)], &two, at(0));
        assert_eq!(
            states(&d.apply(0, vec![fault(7)], &two, at(1))),
            [(7, FaultState::Counted)]
        );
        // Counted: stays counted while it is read, whatever the new value says.
        assert_eq!(
            states(&d.apply(0, vec![fault(7)], &five, at(2))),
            [(7, FaultState::Counted)]
        );
        // Pending: the reads so far are kept and compared with the new value.
        d.apply(1, vec![fault(7)], &five, at(0));
        d.apply(1, vec![fault(7)], &five, at(1));
        assert_eq!(
            states(&d.apply(1, vec![fault(7)], &two, at(2))),
            [(7, FaultState::Counted)]
        );
        // Gone and back: the new value applies from the first read.
        assert!(d.apply(0, vec![], &five, at(3)).is_empty());
        assert_eq!(
            states(&d.apply(0, vec![fault(7)], &five, at(4))),
            [(
                7,
                FaultState::Pending {
                    reads: 1,
                    needed: 5
                }
            )]
        );
    }

    #[test]
    fn a_reload_that_drops_the_override_ends_the_hold_at_the_next_read() {
        let mut d = FaultDebounce::default();
        let t0 = Instant::now();
        let r = rules(7, 1, Some(Duration::from_secs(600)));
        d.apply(0, vec![fault(7)], &r, t0);
        assert_eq!(
            states(&d.apply(0, vec![], &r, t0 + Duration::from_secs(5))),
            [(7, FaultState::Held)]
        );
        assert!(
            d.apply(0, vec![], &HashMap::new(), t0 + Duration::from_secs(10))
                .is_empty()
        );
    }
}
