//! Every way an `hccn_tool` call can end without a reading, and how the tool's answer is
//! mapped to one.
//!
//! The tool's exit status is the low byte of an internal code, so statuses collide across
//! error families (exit 4 is both "invalid device id" and "device not exist", exit 1
//! covers a dozen errors). The classification therefore reads the **message**, on either
//! stream (informational errors such as "busy" and "not supported" go to stdout), and
//! keeps the exit status only for the log.

use std::time::Duration;

/// Why an `hccn_tool` call produced no reading.
#[derive(Debug, thiserror::Error)]
pub enum HccnError {
    /// The tool could not be started (missing, not executable, no resources).
    #[error("cannot run {path}: {source}")]
    Spawn {
        /// The tool's path.
        path: String,
        /// The error from `exec`.
        source: std::io::Error,
    },
    /// The call did not finish within its deadline; its process group was killed.
    #[error("no answer within {0:?}; the tool was killed")]
    Timeout(Duration),
    /// The call waited for its deadline for a free slot (another call to the same NPU,
    /// or the bound on calls in flight) and was not made.
    #[error("waited {0:?} for another hccn_tool call to this NPU or for a free slot; not run")]
    QueueTimeout(Duration),
    /// The tool or the device was busy (`hccn_tool is busy`, `Get lock failed`, `The
    /// device is occupied`, `I2c is busy`), after the retries.
    #[error("busy: {0}")]
    Busy(String),
    /// `The command is not supported on this product.` The (command, NPU) pair is not
    /// called again.
    #[error("the command is not supported on this product")]
    NotSupported,
    /// `Get device health status failed!`: the device did not become ready (the tool
    /// waits up to about five minutes for it).
    #[error("the device is not ready (Get device health status failed!)")]
    DeviceNotReady,
    /// `Get invalid device id.` or `The device is not exist!`: no such NPU here.
    #[error("no such device: {0}")]
    NoDevice(String),
    /// `Get ipconf failed, because no ip was preset there!`
    #[error("no IP is configured on the device")]
    NoIp,
    /// `Execute failed: Link status is down.`
    #[error("the port's link is down")]
    LinkDown,
    /// `Optical module is not present.`
    #[error("no optical module is present")]
    OpticalAbsent,
    /// `permission denied: pls check this cmd run permission.`
    #[error("permission denied (run as root or a member of HwHiAiUser)")]
    PermissionDenied,
    /// `Control link unreachable.` (A3: the cooperating die of the card is unreachable).
    #[error("control link unreachable")]
    ControlLinkUnreachable,
    /// The tool rejected the arguments: a tool version with another grammar.
    #[error("the tool rejected the arguments: {0}")]
    Usage(String),
    /// Any other failure (`Command execute failed!` and the like), or death by a signal.
    #[error("failed (exit {exit:?}): {message}")]
    Failed {
        /// Exit status, `None` when killed by a signal.
        exit: Option<i32>,
        /// The first line of the tool's message.
        message: String,
    },
    /// An output stream exceeded the cap; the rest was not read and the tool was killed.
    #[error("{stream} exceeded {cap} bytes; output discarded")]
    OutputTooLarge {
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// The cap, bytes.
        cap: usize,
    },
    /// The tool said it succeeded but its output is not in a known format.
    #[error("unexpected output: {0}")]
    Parse(String),
}

impl HccnError {
    /// The `result` label of `hcclwatch_hccn_calls_total`.
    pub fn result_label(&self) -> &'static str {
        match self {
            HccnError::Spawn { .. } => "spawn_error",
            HccnError::Timeout(_) => "timeout",
            HccnError::QueueTimeout(_) => "queue_timeout",
            HccnError::Busy(_) => "busy",
            HccnError::NotSupported => "not_supported",
            HccnError::DeviceNotReady => "device_not_ready",
            HccnError::NoDevice(_) => "no_device",
            HccnError::NoIp => "no_ip",
            HccnError::LinkDown => "link_down",
            HccnError::OpticalAbsent => "optical_absent",
            HccnError::PermissionDenied => "permission_denied",
            HccnError::ControlLinkUnreachable => "control_link_unreachable",
            HccnError::Usage(_) => "usage_error",
            HccnError::Failed { .. } => "error",
            HccnError::OutputTooLarge { .. } => "output_too_large",
            HccnError::Parse(_) => "parse_error",
        }
    }

    /// Whether the same call may succeed if retried shortly.
    pub fn is_busy(&self) -> bool {
        matches!(self, HccnError::Busy(_))
    }

    /// Whether this outcome is a property of the product rather than a failure: the
    /// reading is not available here, which is not an error of the collector.
    pub fn is_absence(&self) -> bool {
        matches!(
            self,
            HccnError::NotSupported | HccnError::NoIp | HccnError::OpticalAbsent
        )
    }
}

/// Builds the error a message means, from the message.
type Make = fn(&str) -> HccnError;

/// Messages the tool prints for its error codes, with the error each one means. Matched
/// as substrings of stdout and stderr; the first match wins, so specific texts come
/// before generic ones.
const MESSAGES: &[(&str, Make)] = &[
    ("hccn_tool is busy, please try again.", |m| {
        HccnError::Busy(m.into())
    }),
    ("Get lock failed. Please try again.", |m| {
        HccnError::Busy(m.into())
    }),
    ("The device is occupied. Please try again later.", |m| {
        HccnError::Busy(m.into())
    }),
    ("I2c is busy. Please try again.", |m| {
        HccnError::Busy(m.into())
    }),
    ("The command is not supported on this product.", |_| {
        HccnError::NotSupported
    }),
    ("Get device health status failed!", |_| {
        HccnError::DeviceNotReady
    }),
    ("Get invalid device id.", |m| HccnError::NoDevice(m.into())),
    ("The device is not exist!", |m| {
        HccnError::NoDevice(m.into())
    }),
    ("Get ipconf failed, because no ip was preset there!", |_| {
        HccnError::NoIp
    }),
    ("Execute failed: Link status is down.", |_| {
        HccnError::LinkDown
    }),
    ("Optical module is not present.", |_| {
        HccnError::OpticalAbsent
    }),
    (
        "permission denied: pls check this cmd run permission.",
        |_| HccnError::PermissionDenied,
    ),
    ("Control link unreachable.", |_| {
        HccnError::ControlLinkUnreachable
    }),
    ("Get invalid major cmd", |m| HccnError::Usage(m.into())),
    ("Get invalid parameters!", |m| HccnError::Usage(m.into())),
    ("Get unknown option!", |m| HccnError::Usage(m.into())),
    ("The total count of input parameters is wrong!", |m| {
        HccnError::Usage(m.into())
    }),
    ("Get invalid input param len.", |m| {
        HccnError::Usage(m.into())
    }),
];

/// Maps a finished run to success or an error, from its messages first and its exit
/// status second. `exit` is `None` when a signal ended the tool.
pub fn classify(exit: Option<i32>, stdout: &str, stderr: &str) -> Result<(), HccnError> {
    for (text, make) in MESSAGES {
        if stderr.contains(text) || stdout.contains(text) {
            return Err(make(text));
        }
    }
    match exit {
        Some(0) => Ok(()),
        _ => {
            let message = stderr
                .lines()
                .chain(stdout.lines())
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("(no message)");
            Err(HccnError::Failed {
                exit,
                message: message.chars().take(200).collect(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(exit: Option<i32>, out: &str, err: &str) -> &'static str {
        match classify(exit, out, err) {
            Ok(()) => "ok",
            Err(e) => e.result_label(),
        }
    }

    /// Every error row of the tool's exit table (stream as the tool prints it), and the
    /// collisions: the same exit status means different things.
    #[test]
    fn messages_decide_not_exit_codes() {
        let cases: &[(i32, &str, &str, &str)] = &[
            (11, "hccn_tool is busy, please try again.\n", "", "busy"),
            (25, "", "Get lock failed. Please try again.\n", "busy"),
            (
                31,
                "",
                "The device is occupied. Please try again later.\n",
                "busy",
            ),
            (
                13,
                "The command is not supported on this product.\n",
                "",
                "not_supported",
            ),
            (
                3,
                "",
                "Get device health status failed!\n",
                "device_not_ready",
            ),
            (4, "", "Get invalid device id.\n", "no_device"),
            (4, "", "The device is not exist!\n", "no_device"),
            (
                13,
                "",
                "Get ipconf failed, because no ip was preset there!\n",
                "no_ip",
            ),
            (
                22,
                "",
                "Execute failed: Link status is down.\n",
                "link_down",
            ),
            (20, "Optical module is not present.\n", "", "optical_absent"),
            (
                12,
                "",
                "permission denied: pls check this cmd run permission.\n",
                "permission_denied",
            ),
            (
                15,
                "",
                "Control link unreachable.\n",
                "control_link_unreachable",
            ),
            (
                3,
                "",
                "Get invalid major cmd.\nEnter [ hccn_tool -h ] for more details.\n",
                "usage_error",
            ),
            (
                4,
                "[ hccn_tool -link devid -g ] needs the following parameters:\n",
                "The total count of input parameters is wrong!\n",
                "usage_error",
            ),
            (3, "", "Get unknown option!\n", "usage_error"),
            (1, "", "Command execute failed!\n", "error"),
            (1, "", "Cmd execute failed!\n", "error"),
            (234, "", "", "error"),
        ];
        for (exit, out, err, want) in cases {
            assert_eq!(label(Some(*exit), out, err), *want, "{out:?} {err:?}");
        }
        // Exit 3 alone is ambiguous: the message makes it "not ready" or a usage error.
        assert_ne!(
            label(Some(3), "", "Get device health status failed!"),
            label(Some(3), "", "Get invalid major cmd.")
        );
    }

    #[test]
    fn success_and_signals() {
        assert_eq!(label(Some(0), "link status: UP\n", ""), "ok");
        // A known error text wins even over exit 0 (a bare family base exits 0).
        assert_eq!(
            label(Some(0), "hccn_tool is busy, please try again.\n", ""),
            "busy"
        );
        match classify(None, "", "") {
            Err(HccnError::Failed { exit: None, .. }) => {}
            other => panic!("{other:?}"),
        }
        match classify(Some(1), "partial\n", "Command execute failed!\n") {
            Err(HccnError::Failed { exit, message }) => {
                assert_eq!(exit, Some(1));
                assert_eq!(message, "Command execute failed!");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn absence_and_busy_kinds() {
        assert!(HccnError::NotSupported.is_absence());
        assert!(HccnError::OpticalAbsent.is_absence());
        assert!(!HccnError::Timeout(Duration::from_secs(1)).is_absence());
        assert!(HccnError::Busy("x".into()).is_busy());
        assert!(!HccnError::LinkDown.is_busy());
    }
}
