//! `[compat]`: series under other exporters' names, for dashboards and tools written
//! against them.

use super::section;
use crate::config::schema::Spec;

section! {
    /// `[compat]`: the same readings also under another exporter's metric names.
    pub struct CompatConfig in "compat" {
        /// Also export every reading hcclwatch has under Huawei npu-exporter's metric
        /// names, labels and units (see `docs/metrics.md`).
        npu_exporter: bool = false, Spec::BOOL;
    }
}
