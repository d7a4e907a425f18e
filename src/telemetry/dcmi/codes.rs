//! DCMI return codes and what each means for a reading.
//!
//! The codes come from the DCMI header (`DCMI_ERROR_CODE_BASE = -8000`). Three of them
//! change behaviour: `-8255` marks a (call, type) unsupported for good, `-8012` means the
//! card dropped, and a missing symbol is treated like `-8255`. Everything else omits the
//! series for this cycle and is counted.

use super::ffi::Raw;

/// `DCMI_ERR_CODE_NOT_SUPPORT`.
pub const NOT_SUPPORT: i32 = -8255;
/// `DCMI_ERR_CODE_OPER_NOT_PERMITTED`: not root (in a container: not privileged).
pub const OPER_NOT_PERMITTED: i32 = -8002;
/// `DCMI_ERR_CODE_NOT_REDAY` (sic): the exporter and device plugin treat it as a card drop.
pub const NOT_READY: i32 = -8012;

/// How a failed call is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Never call this (call, type) again.
    Unsupported(UnsupportedReason),
    /// The card dropped.
    CardDropped,
    /// Omit the series this cycle, count the error.
    Failed(i32),
}

/// Why a reading is unsupported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UnsupportedReason {
    /// The library does not export the function.
    MissingSymbol,
    /// The function returned `-8255`.
    NotSupported,
}

impl UnsupportedReason {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            UnsupportedReason::MissingSymbol => "missing_symbol",
            UnsupportedReason::NotSupported => "not_supported",
        }
    }
}

/// Maps a raw failure to its handling.
pub fn classify(raw: Raw) -> Class {
    match raw {
        Raw::Missing => Class::Unsupported(UnsupportedReason::MissingSymbol),
        Raw::Code(NOT_SUPPORT) => Class::Unsupported(UnsupportedReason::NotSupported),
        Raw::Code(NOT_READY) => Class::CardDropped,
        Raw::Code(c) => Class::Failed(c),
    }
}

/// The header's name for a code, for log lines.
pub fn name(code: i32) -> &'static str {
    match code {
        0 => "DCMI_OK",
        -8001 => "INVALID_PARAMETER",
        -8002 => "OPER_NOT_PERMITTED",
        -8003 => "MEM_OPERATE_FAIL",
        -8004 => "SECURE_FUN_FAIL",
        -8005 => "INNER_ERR (is dcmi_init done and /dev/davinci_manager present?)",
        -8006 => "TIME_OUT",
        -8007 => "INVALID_DEVICE_ID",
        -8008 => "DEVICE_NOT_EXIST",
        -8009 => "IOCTL_FAIL",
        -8010 => "SEND_MSG_FAIL",
        -8011 => "RECV_MSG_FAIL",
        -8012 => "NOT_READY (card dropped)",
        -8013 => "NOT_SUPPORT_IN_CONTAINER",
        -8014 => "FILE_OPERATE_FAIL",
        -8015 => "RESET_FAIL",
        -8016 => "ABORT_OPERATE",
        -8017 => "IS_UPGRADING",
        -8020 => "RESOURCE_OCCUPIED",
        -8022 => "PARTITION_NOT_RIGHT",
        -8023 => "CONFIG_INFO_NOT_EXIST",
        -8255 => "NOT_SUPPORT",
        _ => "unknown DCMI error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert_eq!(
            classify(Raw::Missing),
            Class::Unsupported(UnsupportedReason::MissingSymbol)
        );
        assert_eq!(
            classify(Raw::Code(-8255)),
            Class::Unsupported(UnsupportedReason::NotSupported)
        );
        assert_eq!(classify(Raw::Code(-8012)), Class::CardDropped);
        assert_eq!(classify(Raw::Code(-8001)), Class::Failed(-8001));
        assert_eq!(classify(Raw::Code(-8006)), Class::Failed(-8006));
        assert_eq!(classify(Raw::Code(7)), Class::Failed(7));
    }

    #[test]
    fn names() {
        assert_eq!(name(-8255), "NOT_SUPPORT");
        assert!(name(-8012).contains("dropped"));
        assert_eq!(name(-1), "unknown DCMI error");
    }
}
