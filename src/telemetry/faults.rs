//! The fault-level table: which handling level each NPU fault code has.
//!
//! The table is MindCluster's `faultCode.json` (the Ascend device plugin's, 802 codes in 8
//! levels; `data/fault-codes.json`, licence in `data/NOTICE`), compiled in. An SRE can
//! point `telemetry.fault_levels_file` at a file in the same format, typically the
//! `faultCode.json` key of the `mindx-dl-fault-config` ConfigMap they already maintain for
//! the device plugin. As in the device plugin, such a file **replaces** the built-in
//! table; it does not patch it.
//!
//! The format: a JSON object whose keys are level lists (`SeparateNPUCodes`, …) and whose
//! values are arrays of fault codes as hex strings without `0x`. A code listed under two
//! levels gets the more serious one ([`FaultLevel::precedence`]): the built-in file lists
//! `A2301001` under both RestartBusiness and SeparateNPU, and isolating the chip is the
//! safe reading. A file that is not valid is rejected whole, with the file, the key and
//! the offending code named, so a typo never silently turns a code into "not listed".
//!
//! The file may also carry per-code overrides (a level, consecutive reads before a code
//! counts, a time its effect stays after it clears) under one extra key MindCluster
//! ignores, [`super::fault_overrides::OVERRIDES_KEY`]; see that module.
//!
//! The table is shared by the DCMI source (which puts each active code's level into the
//! snapshot when it reads it) and the composition root, which swaps in a new table when
//! SIGHUP re-reads the file ([`SharedFaultTable::replace`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::snapshot::npu::FaultLevel;

use super::fault_overrides::{CodeOverride, OVERRIDES_KEY, parse_overrides};

/// The built-in table (MindCluster's `faultCode.json`, unchanged).
pub const BUILTIN_JSON: &str = include_str!("../../data/fault-codes.json");

/// The keys a fault-level file may have and the level each stands for. The `*Network*`
/// keys are accepted because MindCluster's loader accepts them (its default file has none).
pub const KEYS: &[(&str, FaultLevel)] = &[
    ("NotHandleFaultCodes", FaultLevel::NotHandleFault),
    ("RestartRequestCodes", FaultLevel::RestartRequest),
    ("RestartBusinessCodes", FaultLevel::RestartBusiness),
    ("FreeRestartNPUCodes", FaultLevel::FreeRestartNPU),
    ("RestartNPUCodes", FaultLevel::RestartNPU),
    ("SeparateNPUCodes", FaultLevel::SeparateNPU),
    ("PreSeparateNPUCodes", FaultLevel::PreSeparateNPU),
    ("SubHealthFaultCodes", FaultLevel::SubHealthFault),
    ("NotHandleFaultNetworkCodes", FaultLevel::NotHandleFault),
    ("PreSeparateNPUNetworkCodes", FaultLevel::PreSeparateNPU),
    ("SeparateNPUNetworkCodes", FaultLevel::SeparateNPU),
    ("SubHealthFaultNetworkCodes", FaultLevel::SubHealthFault),
];

/// Why a fault-level file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum FaultTableError {
    /// The file could not be read.
    #[error("cannot read fault-level file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a JSON object.
    #[error("fault-level file {origin}: not a JSON object of code lists: {reason}")]
    Json {
        /// The file (or `built-in`).
        origin: String,
        /// What the JSON parser said.
        reason: String,
    },
    /// A key names no level.
    #[error("fault-level file {origin}: unknown key {key:?}; expected one of {}, {OVERRIDES_KEY}", KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", "))]
    UnknownKey {
        /// The file.
        origin: String,
        /// The key.
        key: String,
    },
    /// A key's value is not an array of strings.
    #[error("fault-level file {origin}: key {key:?} must be an array of hex strings")]
    NotAList {
        /// The file.
        origin: String,
        /// The key.
        key: String,
    },
    /// A code is not 1 to 16 hex digits.
    #[error(
        "fault-level file {origin}: key {key:?}: {code} is not a fault code (1 to 16 hex digits, no 0x, as in MindCluster's faultCode.json)"
    )]
    BadCode {
        /// The file.
        origin: String,
        /// The key.
        key: String,
        /// The offending entry, as JSON.
        code: String,
    },
    /// A per-code override is not valid.
    #[error("fault-level file {origin}: key {key:?}{}: {reason}", if code.is_empty() { String::new() } else { format!(": code {code}") })]
    Override {
        /// The file.
        origin: String,
        /// The key path, e.g. `hcclwatch_overrides.80E01801.clear_after`.
        key: String,
        /// The code as the file writes it (empty when the error is not about one code).
        code: String,
        /// What is wrong.
        reason: String,
    },
}

/// Fault code → level.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultTable {
    levels: HashMap<u64, FaultLevel>,
    overrides: HashMap<u32, CodeOverride>,
    origin: String,
}

impl FaultTable {
    /// The compiled-in table.
    pub fn builtin() -> Self {
        // A test parses the same text, so this cannot fail in a built binary.
        Self::parse(BUILTIN_JSON, "built-in").expect("data/fault-codes.json is valid")
    }

    /// The table for `telemetry.fault_levels_file`: the file when set, else the built-in.
    pub fn from_config(path: Option<&Path>) -> Result<Self, FaultTableError> {
        match path {
            Some(p) => Self::load(p),
            None => Ok(Self::builtin()),
        }
    }

    /// Reads and parses a fault-level file.
    pub fn load(path: &Path) -> Result<Self, FaultTableError> {
        let text = std::fs::read_to_string(path).map_err(|source| FaultTableError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses a table; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, FaultTableError> {
        let doc: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|e| FaultTableError::Json {
                origin: origin.to_string(),
                reason: e.to_string(),
            })?;
        let mut levels: HashMap<u64, FaultLevel> = HashMap::new();
        let mut overrides = HashMap::new();
        for (key, value) in &doc {
            if key == OVERRIDES_KEY {
                overrides = parse_overrides(value, origin)?;
                continue;
            }
            let level = KEYS
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, l)| *l)
                .ok_or_else(|| FaultTableError::UnknownKey {
                    origin: origin.to_string(),
                    key: key.clone(),
                })?;
            let list = value.as_array().ok_or_else(|| FaultTableError::NotAList {
                origin: origin.to_string(),
                key: key.clone(),
            })?;
            for entry in list {
                let code = entry.as_str().and_then(parse_code).ok_or_else(|| {
                    FaultTableError::BadCode {
                        origin: origin.to_string(),
                        key: key.clone(),
                        code: entry.to_string(),
                    }
                })?;
                let slot = levels.entry(code).or_insert(level);
                if level.precedence() > slot.precedence() {
                    *slot = level;
                }
            }
        }
        Ok(Self {
            levels,
            overrides,
            origin: origin.to_string(),
        })
    }

    /// The level of `code`: its override's, else its level list's, if either gives one.
    pub fn level(&self, code: u32) -> Option<FaultLevel> {
        self.override_level(code)
            .or_else(|| self.listed_level(code))
    }

    /// The level of `code` in the level lists, ignoring any override.
    pub fn listed_level(&self, code: u32) -> Option<FaultLevel> {
        self.levels.get(&u64::from(code)).copied()
    }

    /// The level the file's overrides give `code`, if any.
    pub fn override_level(&self, code: u32) -> Option<FaultLevel> {
        self.overrides.get(&code).and_then(|o| o.level)
    }

    /// The per-code overrides (empty for the built-in table).
    pub fn overrides(&self) -> &HashMap<u32, CodeOverride> {
        &self.overrides
    }

    /// Codes per level.
    pub fn counts(&self) -> BTreeMap<FaultLevel, usize> {
        let mut out = BTreeMap::new();
        for l in self.levels.values() {
            *out.entry(*l).or_default() += 1;
        }
        out
    }

    /// Number of codes.
    pub fn len(&self) -> usize {
        self.levels.len()
    }

    /// Whether the table lists no code.
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// Where the table came from: a path, or `built-in`.
    pub fn origin(&self) -> &str {
        &self.origin
    }
}

/// A fault code as MindCluster writes it: hex digits without `0x` (`StringTool.HexStringToInt`
/// parses base 16 into an int64), at most 16 of them.
fn parse_code(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// The table in use, shared between the reader (the DCMI source) and whoever reloads it.
/// A reload swaps the whole table at once: a reader sees the old table or the new one,
/// never a mix.
#[derive(Debug, Clone)]
pub struct SharedFaultTable(Arc<RwLock<Arc<FaultTable>>>);

impl SharedFaultTable {
    /// Shares `table`.
    pub fn new(table: FaultTable) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(table))))
    }

    /// The current table.
    pub fn get(&self) -> Arc<FaultTable> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the table.
    pub fn replace(&self, table: FaultTable) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
    }
}

impl Default for SharedFaultTable {
    fn default() -> Self {
        Self::new(FaultTable::builtin())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unique codes per key of the shipped file, as MindCluster's faultCode.json at
    /// 22bb3d98 has them (counted independently of this parser, by reading the raw JSON).
    #[test]
    fn shipped_file_has_every_level_with_its_count() {
        let raw: BTreeMap<String, Vec<String>> = serde_json::from_str(BUILTIN_JSON).unwrap();
        let unique = |k: &str| {
            let mut v = raw[k].clone();
            v.sort();
            v.dedup();
            v.len()
        };
        assert_eq!(unique("NotHandleFaultCodes"), 132);
        assert_eq!(unique("RestartRequestCodes"), 33);
        assert_eq!(unique("RestartBusinessCodes"), 25);
        assert_eq!(
            raw["RestartBusinessCodes"].len(),
            26,
            "B4060011 is listed twice"
        );
        assert_eq!(unique("FreeRestartNPUCodes"), 23);
        assert_eq!(unique("RestartNPUCodes"), 162);
        assert_eq!(unique("SeparateNPUCodes"), 215);
        assert_eq!(unique("PreSeparateNPUCodes"), 200);
        assert_eq!(unique("SubHealthFaultCodes"), 13);
        assert_eq!(raw.len(), 8);
    }

    #[test]
    fn builtin_table_counts_per_level() {
        let t = FaultTable::builtin();
        assert_eq!(t.len(), 802);
        let c = t.counts();
        let n = |l: FaultLevel| c.get(&l).copied().unwrap_or(0);
        assert_eq!(n(FaultLevel::NotHandleFault), 132);
        assert_eq!(n(FaultLevel::RestartRequest), 33);
        // 25 unique, one of which (A2301001) is also SeparateNPU and goes there.
        assert_eq!(n(FaultLevel::RestartBusiness), 24);
        assert_eq!(n(FaultLevel::FreeRestartNPU), 23);
        assert_eq!(n(FaultLevel::RestartNPU), 162);
        assert_eq!(n(FaultLevel::SeparateNPU), 215);
        assert_eq!(n(FaultLevel::PreSeparateNPU), 200);
        assert_eq!(n(FaultLevel::SubHealthFault), 13);
        assert_eq!(n(FaultLevel::ManuallySeparateNPU), 0);
    }

    #[test]
    fn builtin_levels_of_known_codes() {
        let t = FaultTable::builtin();
        assert_eq!(t.level(0xA230_1001), Some(FaultLevel::SeparateNPU));
        assert_eq!(t.level(0x40F8_4E00), Some(FaultLevel::RestartNPU));
        assert_eq!(t.level(0x80E1_8005), Some(FaultLevel::RestartNPU));
        assert_eq!(t.level(0x80E0_1801), Some(FaultLevel::RestartBusiness));
        assert_eq!(t.level(0x8107_8603), Some(FaultLevel::NotHandleFault));
        assert_eq!(t.level(0x80E2_1007), Some(FaultLevel::NotHandleFault));
        assert_eq!(t.level(0x80E3_A201), Some(FaultLevel::SeparateNPU));
        assert_eq!(t.level(0x81A3_880C), Some(FaultLevel::SubHealthFault));
        assert_eq!(t.level(0x8C0E_4E00), Some(FaultLevel::FreeRestartNPU));
        assert_eq!(t.level(0x80C9_8008), Some(FaultLevel::RestartRequest));
        // "020001002" is 0x20001002 (the leading zero does not matter), not "200001002".
        assert_eq!(t.level(0x2000_1002), Some(FaultLevel::SeparateNPU));
        assert_eq!(t.level(0x1234_5678), None);
    }

    #[test]
    fn duplicate_codes_take_the_more_serious_level_whatever_the_order() {
        for doc in [
            r#"{"NotHandleFaultCodes":["AB"],"SeparateNPUCodes":["ab"]}"#,
            r#"{"SeparateNPUCodes":["AB"],"NotHandleFaultCodes":["AB"]}"#,
        ] {
            let t = FaultTable::parse(doc, "t").unwrap();
            assert_eq!(t.level(0xAB), Some(FaultLevel::SeparateNPU), "{doc}");
        }
    }

    #[test]
    fn bad_files_name_the_file_the_key_and_the_code() {
        let e = FaultTable::parse(r#"{"SeparateNPUCodes":["80E3A201","80G1"]}"#, "/etc/f.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/etc/f.json"), "{e}");
        assert!(e.contains("SeparateNPUCodes"), "{e}");
        assert!(e.contains("\"80G1\""), "{e}");
        let e = FaultTable::parse(r#"{"SeparateNPUCodes":[1234]}"#, "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("1234"), "{e}");
        let e = FaultTable::parse(r#"{"SeparateNpuCodes":[]}"#, "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown key \"SeparateNpuCodes\""), "{e}");
        assert!(
            e.contains("hcclwatch_overrides"),
            "the overrides key is listed: {e}"
        );
        assert!(
            e.contains("SeparateNPUCodes"),
            "the valid keys are listed: {e}"
        );
        let e = FaultTable::parse(r#"{"SeparateNPUCodes":"80E3A201"}"#, "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be an array"), "{e}");
        assert!(FaultTable::parse("[1]", "f").is_err());
        assert!(FaultTable::parse(r#"{"SeparateNPUCodes":["0x80"]}"#, "f").is_err());
        assert!(FaultTable::parse(r#"{"SeparateNPUCodes":[""]}"#, "f").is_err());
        assert!(FaultTable::parse(r#"{"SeparateNPUCodes":["12345678901234567"]}"#, "f").is_err());
        let e = FaultTable::load(Path::new("/nonexistent/faults.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/faults.json"), "{e}");
    }

    #[test]
    fn a_file_replaces_the_builtin_table() {
        let t = FaultTable::parse(r#"{"NotHandleFaultCodes":["80E3A201"]}"#, "f").unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t.level(0x80E3_A201), Some(FaultLevel::NotHandleFault));
        assert_eq!(t.level(0x40F8_4E00), None);
        assert_eq!(t.origin(), "f");
    }

    #[test]
    fn shared_table_swaps_whole() {
        let shared = SharedFaultTable::default();
        let before = shared.get();
        shared.replace(FaultTable::parse(r#"{"SeparateNPUCodes":["1"]}"#, "new").unwrap());
        assert_eq!(before.len(), 802, "a reader keeps the table it took");
        assert_eq!(shared.get().origin(), "new");
        assert_eq!(shared.get().level(1), Some(FaultLevel::SeparateNPU));
    }
}
