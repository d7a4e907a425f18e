//! `[collectors]`: which collectors run.

use super::section;
use crate::config::schema::Spec;

section! {
    /// `[collectors]`: each collector can be switched off. The NPU inventory (chip list and
    /// identity) is not switchable: every other NPU collector needs it.
    pub struct CollectorsConfig in "collectors" {
        /// NPU health and fault codes.
        health: bool = true, Spec::BOOL;
        /// NPU temperature, power, voltage, clock.
        sensors: bool = true, Spec::BOOL;
        /// NPU utilisation.
        utilization: bool = true, Spec::BOOL;
        /// NPU HBM, DDR, ECC.
        memory: bool = true, Spec::BOOL;
        /// NPU RoCE/MAC counters and HCCS.
        network: bool = true, Spec::BOOL;
        /// Host CPU, memory, network interfaces.
        host: bool = true, Spec::BOOL;
        /// NPU ports through `hccn_tool` (`npu_ports`).
        ports: bool = true, Spec::BOOL;
        /// Optical modules through `hccn_tool` (`npu_optics`).
        optics: bool = true, Spec::BOOL;
    }
}
