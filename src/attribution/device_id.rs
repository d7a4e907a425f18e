//! Ascend device-plugin device IDs, as kubelet and the pod-resources API report them, and
//! the resource names they come under.
//!
//! The Ascend device plugin names each device it advertises after the chip's physical id:
//!
//! - a whole chip: `<name>-<phyID>`, e.g. `Ascend910-0`, `Ascend310P-3`, or `npu-0` where the
//!   plugin uses the generic `huawei.com/npu` resource;
//! - a vNPU slice: `<name>-<template>-<vdevID>-<phyID>`, e.g. `Ascend910-2c-100-1` or
//!   `Ascend310P-4c.3cpu-100-0`; a template starts with a digit (`2c`, `4c.3cpu.ndvpp`);
//! - soft-share mode appends `-<i>` to either form, one device per share.
//!
//! The chip name part can be renamed by the plugin's configuration (it may itself contain
//! `-`), so an ID is read from the right: the trailing numbers, and whether the token before
//! them is a vNPU template. Nothing here depends on the name being `Ascend910`.

/// What a device ID says about the chip it lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceId {
    /// Physical id of the chip (the `npu` label).
    pub phy: u32,
    /// vNPU id, for a vNPU slice.
    pub vdev: Option<u32>,
    /// Soft-share index, when the plugin shares the device.
    pub share: Option<u32>,
}

fn number(t: &str) -> Option<u32> {
    (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .then(|| t.parse().ok())
        .flatten()
}

/// A vNPU template token: starts with a digit and is not a plain number (`2c`, `4c.3cpu`).
fn is_template(t: &str) -> bool {
    t.as_bytes().first().is_some_and(u8::is_ascii_digit) && number(t).is_none()
}

/// Parses one device ID; `None` for a form the device plugin does not produce.
pub fn parse(id: &str) -> Option<DeviceId> {
    let tokens: Vec<&str> = id.trim().split('-').collect();
    if tokens.iter().any(|t| t.is_empty()) {
        return None;
    }
    // The last token that is not a number: the chip name's last part, or the template.
    let j = tokens.iter().rposition(|t| number(t).is_none())?;
    let nums: Vec<u32> = tokens[j + 1..].iter().filter_map(|t| number(t)).collect();
    // A name must come first and start with a letter.
    if !tokens[0].starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    if is_template(tokens[j]) {
        if j == 0 {
            return None;
        }
        match nums[..] {
            [vdev, phy] => Some(DeviceId {
                phy,
                vdev: Some(vdev),
                share: None,
            }),
            [vdev, phy, share] => Some(DeviceId {
                phy,
                vdev: Some(vdev),
                share: Some(share),
            }),
            _ => None,
        }
    } else {
        match nums[..] {
            [phy] => Some(DeviceId {
                phy,
                vdev: None,
                share: None,
            }),
            [phy, share] => Some(DeviceId {
                phy,
                vdev: None,
                share: Some(share),
            }),
            _ => None,
        }
    }
}

/// Splits an annotation value listing device IDs (`Ascend910-0,Ascend910-1`; whitespace
/// separates too, as some writers use it).
pub fn split_list(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
}

/// Whether an extended-resource name is an Ascend NPU resource: one of `prefixes` itself,
/// or a prefix followed by `-` and a type suffix (the vNPU resources
/// `huawei.com/Ascend910-2c`, the 310P mixed-insert `huawei.com/Ascend310P-V`). The dynamic
/// vNPU core count `huawei.com/npu-core` counts AI cores, not chips, and is not one.
pub fn is_npu_resource(resource: &str, prefixes: &[String]) -> bool {
    if resource.rsplit('/').next() == Some("npu-core") {
        return false;
    }
    prefixes.iter().any(|p| {
        resource
            .strip_prefix(p.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chip(phy: u32) -> Option<DeviceId> {
        Some(DeviceId {
            phy,
            vdev: None,
            share: None,
        })
    }

    #[test]
    fn whole_chips() {
        assert_eq!(parse("Ascend910-0"), chip(0));
        assert_eq!(parse("Ascend910-15"), chip(15));
        assert_eq!(parse("Ascend310P-3"), chip(3));
        assert_eq!(parse("Ascend310-7"), chip(7));
        assert_eq!(parse("npu-4"), chip(4));
        // 310P mixed-insert types carry a suffix in the name.
        assert_eq!(parse("Ascend310P-V-2"), chip(2));
        assert_eq!(parse("Ascend310P-IPro-1"), chip(1));
        // A renamed public name, dashes included.
        assert_eq!(parse("my-npu-6"), chip(6));
    }

    #[test]
    fn vnpu_slices() {
        assert_eq!(
            parse("Ascend910-2c-100-1"),
            Some(DeviceId {
                phy: 1,
                vdev: Some(100),
                share: None
            })
        );
        assert_eq!(
            parse("Ascend310P-4c.3cpu-100-0"),
            Some(DeviceId {
                phy: 0,
                vdev: Some(100),
                share: None
            })
        );
        assert_eq!(
            parse("Ascend910-5c.1cpu.8g-131-7"),
            Some(DeviceId {
                phy: 7,
                vdev: Some(131),
                share: None
            })
        );
    }

    #[test]
    fn soft_share_suffix() {
        assert_eq!(
            parse("Ascend910-3-2"),
            Some(DeviceId {
                phy: 3,
                vdev: None,
                share: Some(2)
            })
        );
        assert_eq!(
            parse("Ascend910-2c-100-1-0"),
            Some(DeviceId {
                phy: 1,
                vdev: Some(100),
                share: Some(0)
            })
        );
    }

    #[test]
    fn other_forms_are_refused() {
        for bad in [
            "",
            "0",
            "3-1",
            "Ascend910",
            "Ascend910-",
            "Ascend910--1",
            "Ascend910-2c-1",
            "Ascend910-2c-1-2-3-4",
            "Ascend910-1-2-3",
            "2c-100-1",
            "Ascend910-x",
            "Ascend910-99999999999",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn annotation_lists() {
        let ids: Vec<&str> =
            split_list("Ascend910-0,Ascend910-1, Ascend910-2 Ascend910-3").collect();
        assert_eq!(
            ids,
            ["Ascend910-0", "Ascend910-1", "Ascend910-2", "Ascend910-3"]
        );
        assert_eq!(split_list(" , ").count(), 0);
    }

    #[test]
    fn resource_names() {
        let p: Vec<String> = [
            "huawei.com/Ascend910",
            "huawei.com/Ascend310P",
            "huawei.com/Ascend310",
            "huawei.com/npu",
        ]
        .map(String::from)
        .to_vec();
        for yes in [
            "huawei.com/Ascend910",
            "huawei.com/Ascend910-2c",
            "huawei.com/Ascend310P",
            "huawei.com/Ascend310P-4c.3cpu",
            "huawei.com/Ascend310P-V",
            "huawei.com/Ascend310",
            "huawei.com/npu",
        ] {
            assert!(is_npu_resource(yes, &p), "{yes}");
        }
        for no in [
            "huawei.com/npu-core",
            "huawei.com/Ascend910b",
            "nvidia.com/gpu",
            "cpu",
            "huawei.com/Ascend",
        ] {
            assert!(!is_npu_resource(no, &p), "{no}");
        }
        let custom = vec!["example.com/accel".to_string()];
        assert!(is_npu_resource("example.com/accel", &custom));
        assert!(!is_npu_resource("huawei.com/Ascend910", &custom));
    }
}
