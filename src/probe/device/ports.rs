//! The group's NPU port table: every member's RoCE ports (physical id and device IP),
//! all-gathered when the group forms, so every member numbers the ports the same way.

use std::net::Ipv4Addr;

use crate::collective::{CollResult, Communicator, DataType};

/// Most NPU ports one member announces (a 16-NPU node; hccn_tool ids are at most two
/// digits and logic ids below 16). More are cut, in phy order, and logged.
pub const MAX_LOCAL_PORTS: usize = 16;

/// One NPU port of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Port {
    /// Candidate index of the member that owns it.
    pub node: usize,
    /// Physical NPU id on that node (the `npu` label).
    pub phy: u32,
    /// Its RoCE device IP.
    pub ip: Ipv4Addr,
}

/// Encodes this member's ports as `MAX_LOCAL_PORTS` words of `(phy + 1) << 32 | ip`; an
/// empty slot is 0.
pub fn encode(local: &[(u32, Ipv4Addr)]) -> Vec<u8> {
    let mut words = [0u64; MAX_LOCAL_PORTS];
    let mut sorted: Vec<(u32, Ipv4Addr)> = local.to_vec();
    sorted.sort();
    sorted.dedup_by_key(|(phy, _)| *phy);
    for (slot, (phy, ip)) in words.iter_mut().zip(sorted.iter()) {
        *slot = (u64::from(*phy) + 1) << 32 | u64::from(u32::from(*ip));
    }
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Decodes the all-gathered tables of `members` (candidate indices, in rank order). Slots
/// that are empty, out of range or repeat a phy id or an IP already seen are dropped, so a
/// member cannot make two ports share an identity; a member listed twice keeps only its
/// first table, so no member has more than [`MAX_LOCAL_PORTS`] ports.
pub fn decode(bytes: &[u8], members: &[usize]) -> Vec<Port> {
    let mut out: Vec<Port> = Vec::new();
    let per = MAX_LOCAL_PORTS * 8;
    for (rank, chunk) in bytes.chunks_exact(per).enumerate() {
        let Some(&node) = members.get(rank) else {
            break;
        };
        if members[..rank].contains(&node) {
            continue;
        }
        for w in chunk.chunks_exact(8) {
            let word = u64::from_le_bytes(w.try_into().unwrap_or_default());
            let tag = word >> 32;
            if tag == 0 || tag > 256 {
                continue;
            }
            let phy = (tag - 1) as u32;
            let ip = Ipv4Addr::from((word & 0xFFFF_FFFF) as u32);
            if ip.is_unspecified()
                || out
                    .iter()
                    .any(|p| (p.node == node && p.phy == phy) || p.ip == ip)
            {
                continue;
            }
            out.push(Port { node, phy, ip });
        }
    }
    out.sort();
    out
}

/// All-gathers every member's local ports; `members[rank]` is the candidate index of each
/// rank.
pub fn exchange(
    c: &mut Communicator,
    local: &[(u32, Ipv4Addr)],
    members: &[usize],
) -> CollResult<Vec<Port>> {
    if local.len() > MAX_LOCAL_PORTS {
        tracing::warn!(
            ports = local.len(),
            kept = MAX_LOCAL_PORTS,
            "more NPU ports than the device plane probes; the lowest physical ids are kept"
        );
    }
    let mine = encode(local);
    let mut all = vec![0u8; mine.len() * c.size()];
    c.all_gather_agreed("npu ports", &mine, &mut all, DataType::Uint64)?;
    Ok(decode(&all, members))
}

/// All-gathers every member's NPU vNIC addresses (the HCCS ping mesh's destinations)
/// with its super-pod id, and returns the NPUs of `me`'s super-pod. vNIC addresses repeat
/// across super-pods, so members of other super-pods are left out before duplicates are
/// dropped. Every member takes part, with or without addresses, so the group stays in
/// lock step.
pub fn exchange_vnics(
    c: &mut Communicator,
    local: &[(u32, Ipv4Addr)],
    super_pod: Option<u32>,
    members: &[usize],
) -> CollResult<Vec<super::hccs::Destination>> {
    let mut mine = encode(local);
    let pod_word = super_pod.map_or(0, |p| u64::from(p) + 1);
    mine.extend_from_slice(&pod_word.to_le_bytes());
    let mut all = vec![0u8; mine.len() * c.size()];
    c.all_gather_agreed("npu vnics", &mine, &mut all, DataType::Uint64)?;
    Ok(decode_vnics(&all, members, c.rank()))
}

/// Decodes [`exchange_vnics`]' rows, keeping the members whose super-pod word equals
/// rank `me_rank`'s.
fn decode_vnics(bytes: &[u8], members: &[usize], me_rank: usize) -> Vec<super::hccs::Destination> {
    let per = (MAX_LOCAL_PORTS + 1) * 8;
    let rows: Vec<&[u8]> = bytes.chunks_exact(per).collect();
    let pod = |row: &[u8]| u64::from_le_bytes(row[per - 8..].try_into().unwrap_or_default());
    let Some(my_pod) = rows.get(me_rank).map(|r| pod(r)) else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let mut kept_members = Vec::new();
    for (rank, row) in rows.iter().enumerate() {
        if let Some(&node) = members.get(rank)
            && pod(row) == my_pod
        {
            kept.extend_from_slice(&row[..per - 8]);
            kept_members.push(node);
        }
    }
    decode(&kept, &kept_members)
        .into_iter()
        .map(|p| super::hccs::Destination {
            node: p.node,
            npu: p.phy,
            ip: p.ip,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `port_table` fuzz target: a member listed twice gave one node 17 ports
    /// (its full table from the first rank plus one from the second).
    #[test]
    fn a_member_listed_twice_keeps_one_table() {
        let first: Vec<(u32, Ipv4Addr)> = (0..16)
            .map(|i| (i, Ipv4Addr::new(10, 0, 0, 1 + i as u8)))
            .collect();
        let second = vec![(40, Ipv4Addr::new(10, 0, 1, 1))];
        let mut bytes = encode(&first);
        bytes.extend(encode(&second));
        let ports = decode(&bytes, &[3, 3]);
        assert_eq!(ports.len(), 16);
        assert!(ports.iter().all(|p| p.node == 3 && p.phy < 16));
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn tables_round_trip_sorted_by_node_and_phy() {
        let a = encode(&[(1, ip("10.0.0.2")), (0, ip("10.0.0.1"))]);
        let b = encode(&[(0, ip("10.0.1.1"))]);
        let ports = decode(&[a, b].concat(), &[3, 7]);
        assert_eq!(
            ports,
            vec![
                Port {
                    node: 3,
                    phy: 0,
                    ip: ip("10.0.0.1")
                },
                Port {
                    node: 3,
                    phy: 1,
                    ip: ip("10.0.0.2")
                },
                Port {
                    node: 7,
                    phy: 0,
                    ip: ip("10.0.1.1")
                },
            ]
        );
    }

    #[test]
    fn vnic_tables_keep_only_this_super_pod() {
        let row = |ports: &[(u32, Ipv4Addr)], pod: u64| {
            let mut b = encode(ports);
            b.extend_from_slice(&pod.to_le_bytes());
            b
        };
        // Members 0 and 2 in super-pod 7 (word 8), member 1 in pod 3 with the same
        // addresses as member 0 (vNIC addresses repeat across super-pods).
        let a = row(&[(0, ip("192.0.2.199"))], 8);
        let b = row(&[(0, ip("192.0.2.199"))], 4);
        let c = row(&[(1, ip("192.1.3.198"))], 8);
        let all = [a, b, c].concat();
        let got: Vec<(usize, u32)> = decode_vnics(&all, &[10, 11, 12], 0)
            .iter()
            .map(|d| (d.node, d.npu))
            .collect();
        assert_eq!(got, vec![(10, 0), (12, 1)]);
        let other: Vec<usize> = decode_vnics(&all, &[10, 11, 12], 1)
            .iter()
            .map(|d| d.node)
            .collect();
        assert_eq!(other, vec![11]);
    }

    #[test]
    fn duplicate_identities_and_garbage_are_dropped() {
        // Member 1 claims member 0's IP; member 0 lists phy 0 twice.
        let a = encode(&[(0, ip("10.0.0.1")), (0, ip("10.0.0.9"))]);
        let b = encode(&[(2, ip("10.0.0.1")), (3, ip("10.0.0.3"))]);
        let ports = decode(&[a, b].concat(), &[0, 1]);
        assert_eq!(ports.len(), 2, "{ports:?}");
        let junk = vec![0xFFu8; MAX_LOCAL_PORTS * 8];
        assert!(decode(&junk, &[0]).is_empty());
        assert!(decode(&[1, 2, 3], &[0]).is_empty());
    }
}
