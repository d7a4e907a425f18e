//! `/etc/hccn.conf`: the NPU network settings `hccn_tool -s` commands wrote, one
//! `key_<phy>=value` per line.
//!
//! hcclwatch reads only `address_<phy>`, the RoCE IP of each NPU (what HCCL rank tables
//! call `device_ip`): it lists the NPUs when DCMI has none, and gives a device IP when
//! `hccn_tool -ip -g` cannot. Lookup follows the tool: an exact key up to the first `=`,
//! lines starting with `#` or shorter than 3 characters skipped. When a key repeats,
//! the last line wins, as the tool appends a rewritten key at the end.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;

/// The `address_<phy>` entries of a `hccn.conf` text, by physical NPU id. Entries whose
/// value is not an IPv4 address are left out.
pub fn addresses(text: &str) -> BTreeMap<u32, Ipv4Addr> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.len() < 3 || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let Some(phy) = key.strip_prefix("address_") else {
            continue;
        };
        if phy.is_empty() || !phy.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let (Ok(phy), Ok(ip)) = (phy.parse::<u32>(), value.trim().parse::<Ipv4Addr>()) {
            out.insert(phy, ip);
        }
    }
    out
}

/// Reads `path`; a missing or unreadable file has no addresses (nodes without RoCE
/// configuration have no such file).
pub fn read_addresses(path: &Path) -> BTreeMap<u32, Ipv4Addr> {
    std::fs::read_to_string(path)
        .map(|t| addresses(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_address_keys_only() {
        let text = "\
address_0=29.1.137.205
netmask_0=255.255.0.0
netdetect_0=29.1.0.1
gateway_0=29.1.0.1
send_arp_status_0=1
# address_1=10.0.0.1
address_1=29.1.137.206
address_x=1.2.3.4
address_2=not-an-ip
IPv6address_3=fe80::1
address_12=29.1.137.217
address_1=29.1.137.207
";
        let m = addresses(text);
        assert_eq!(
            m.into_iter().collect::<Vec<_>>(),
            vec![
                (0, Ipv4Addr::new(29, 1, 137, 205)),
                (1, Ipv4Addr::new(29, 1, 137, 207)),
                (12, Ipv4Addr::new(29, 1, 137, 217)),
            ]
        );
    }

    #[test]
    fn missing_file_has_no_addresses() {
        assert!(read_addresses(Path::new("/nonexistent/hccn.conf")).is_empty());
    }
}
