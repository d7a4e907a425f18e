//! Errors with HCCL's result codes.
//!
//! Every error carries the HCCL code an HCCL user would see, plus what this engine knows
//! and HCCL's opaque codes do not say: which operation, which step, which peer.

use std::fmt;

/// `HcclResult` codes used by the engine (values from `hccl_types.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum HcclCode {
    /// `HCCL_E_PARA` (1): invalid argument.
    Para = 1,
    /// `HCCL_E_INTERNAL` (4).
    Internal = 4,
    /// `HCCL_E_NOT_SUPPORT` (5).
    NotSupport = 5,
    /// `HCCL_E_TIMEOUT` (9).
    Timeout = 9,
    /// `HCCL_E_OPEN_FILE_FAILURE` (10).
    OpenFile = 10,
    /// `HCCL_E_TCP_CONNECT` (11).
    TcpConnect = 11,
    /// `HCCL_E_TCP_TRANSFER` (13).
    TcpTransfer = 13,
    /// `HCCL_E_NETWORK` (19).
    Network = 19,
    /// `HCCL_E_REMOTE` (21): the peer reported a failure.
    Remote = 21,
}

impl HcclCode {
    /// The numeric `HcclResult`.
    pub fn value(self) -> u32 {
        self as u32
    }

    /// The `HCCL_E_*` name.
    pub fn name(self) -> &'static str {
        match self {
            HcclCode::Para => "HCCL_E_PARA",
            HcclCode::Internal => "HCCL_E_INTERNAL",
            HcclCode::NotSupport => "HCCL_E_NOT_SUPPORT",
            HcclCode::Timeout => "HCCL_E_TIMEOUT",
            HcclCode::OpenFile => "HCCL_E_OPEN_FILE_FAILURE",
            HcclCode::TcpConnect => "HCCL_E_TCP_CONNECT",
            HcclCode::TcpTransfer => "HCCL_E_TCP_TRANSFER",
            HcclCode::Network => "HCCL_E_NETWORK",
            HcclCode::Remote => "HCCL_E_REMOTE",
        }
    }
}

/// A failed collective operation or setup step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollError {
    /// HCCL result code.
    pub code: HcclCode,
    /// What was being done, e.g. `all_reduce ring reduce-scatter step 2/3`.
    pub step: String,
    /// The peer rank involved, when there is one.
    pub peer: Option<usize>,
    /// What went wrong.
    pub message: String,
}

impl CollError {
    /// A new error.
    pub fn new(
        code: HcclCode,
        step: impl Into<String>,
        peer: Option<usize>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            code,
            step: step.into(),
            peer,
            message: message.into(),
        }
    }

    /// `HCCL_E_PARA` for a bad argument.
    pub fn para(step: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(HcclCode::Para, step, None, message)
    }
}

impl fmt::Display for CollError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.code.name(),
            self.code.value(),
            self.step
        )?;
        if let Some(p) = self.peer {
            write!(f, " with peer rank {p}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for CollError {}

/// Result of an engine call.
pub type CollResult<T> = Result<T, CollError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_code_step_and_peer() {
        let e = CollError::new(
            HcclCode::Timeout,
            "all_reduce step 1/3",
            Some(2),
            "no data for 5s",
        );
        assert_eq!(
            e.to_string(),
            "HCCL_E_TIMEOUT (9): all_reduce step 1/3 with peer rank 2: no data for 5s"
        );
        assert_eq!(HcclCode::Remote.value(), 21);
        assert_eq!(HcclCode::TcpTransfer.value(), 13);
    }
}
