//! The HCCL environment variables the engine honours, with HCCL's rules:
//! `HCCL_IF_IP`, `HCCL_SOCKET_IFNAME` (prefix list, `^` excludes, `=` exact),
//! `HCCL_IF_BASE_PORT`, `HCCL_CONNECT_TIMEOUT`, `HCCL_EXEC_TIMEOUT`, `HCCL_RDMA_TC`,
//! `HCCL_ALGO`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// An HCCL environment variable that cannot be used, or no interface to listen on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// `HCCL_IF_IP` does not parse as an address.
    #[error("HCCL_IF_IP={value:?} is not an IP address")]
    NotAnIp {
        /// The variable's value.
        value: String,
    },
    /// `HCCL_SOCKET_IFNAME` selects no interface of this host.
    #[error("HCCL_SOCKET_IFNAME={spec:?} matches no interface with an address")]
    NoInterfaceMatches {
        /// The variable's value.
        spec: String,
    },
    /// Neither variable is set and the host has no IPv4 interface.
    #[error("no interface with an IPv4 address; set HCCL_IF_IP")]
    NoIpv4Interface,
    /// A numeric variable is not an integer.
    #[error("{name}={value:?} is not an integer")]
    NotAnInteger {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
    },
    /// A numeric variable is outside HCCL's range.
    #[error("{name}={value} is outside [{lo}, {hi}]")]
    OutOfRange {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: u64,
        /// Smallest accepted value.
        lo: u64,
        /// Largest accepted value.
        hi: u64,
    },
    /// `HCCL_RDMA_TC` is not DSCP × 4.
    #[error("HCCL_RDMA_TC={value} is not a multiple of 4 (it is DSCP × 4)")]
    TrafficClassNotDscp {
        /// Its value.
        value: u64,
    },
}

/// One interface address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    /// Interface name.
    pub name: String,
    /// Address.
    pub addr: IpAddr,
}

/// This host's interface addresses (through sysinfo).
pub fn interfaces() -> Vec<Iface> {
    let mut out = Vec::new();
    if let Ok(n) = sysinfo::Networks::new_with_refreshed_list() {
        for (name, data) in n.iter() {
            for ip in data.ip_networks() {
                out.push(Iface {
                    name: name.to_string_lossy().into_owned(),
                    addr: ip.addr,
                });
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name).then(a.addr.cmp(&b.addr)));
    out
}

fn rule_matches(rule: &str, name: &str) -> bool {
    match rule.strip_prefix('=') {
        Some(exact) => name == exact,
        None => name.starts_with(rule),
    }
}

/// Applies `HCCL_SOCKET_IFNAME` to `ifaces` (IPv4 preferred, as `HCCL_SOCKET_FAMILY`
/// defaults to AF_INET). Forms: `eth,enp` (prefixes), `^eth` (exclude prefix), `=eth0`
/// (exact), `^=eth0` (exclude exact). The first matching interface wins.
pub fn pick_by_ifname(spec: &str, ifaces: &[Iface]) -> Option<Iface> {
    let spec = spec.trim();
    let (exclude, list) = match spec.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, spec),
    };
    let rules: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .collect();
    let ok = |i: &&Iface| {
        let hit = rules.iter().any(|r| rule_matches(r, &i.name));
        if exclude { !hit } else { hit }
    };
    ifaces
        .iter()
        .filter(ok)
        .find(|i| i.addr.is_ipv4())
        .or_else(|| ifaces.iter().find(|i| ok(i)))
        .cloned()
}

/// HCCL's default order without any variable: non-docker, non-loopback interfaces
/// (lexicographic), then docker, then loopback.
pub fn pick_default(ifaces: &[Iface]) -> Option<Iface> {
    let class = |i: &Iface| {
        if i.addr.is_loopback() || i.name == "lo" {
            2
        } else if i.name.starts_with("docker") {
            1
        } else {
            0
        }
    };
    let mut v: Vec<&Iface> = ifaces.iter().filter(|i| i.addr.is_ipv4()).collect();
    v.sort_by_key(|i| (class(i), i.name.clone()));
    v.first().map(|i| (*i).clone())
}

/// The address the root listens on: `HCCL_IF_IP`, else `HCCL_SOCKET_IFNAME`, else the
/// default order.
pub fn root_ip(env: &HashMap<String, String>, ifaces: &[Iface]) -> Result<IpAddr, EnvError> {
    if let Some(ip) = env.get("HCCL_IF_IP") {
        return ip
            .trim()
            .parse()
            .map_err(|_| EnvError::NotAnIp { value: ip.clone() });
    }
    if let Some(spec) = env.get("HCCL_SOCKET_IFNAME") {
        return pick_by_ifname(spec, ifaces)
            .map(|i| i.addr)
            .ok_or_else(|| EnvError::NoInterfaceMatches { spec: spec.clone() });
    }
    pick_default(ifaces)
        .map(|i| i.addr)
        .ok_or(EnvError::NoIpv4Interface)
}

fn int_var(
    env: &HashMap<String, String>,
    name: &'static str,
    lo: u64,
    hi: u64,
    default: u64,
) -> Result<u64, EnvError> {
    match env.get(name) {
        None => Ok(default),
        Some(v) => {
            let n: u64 = v.trim().parse().map_err(|_| EnvError::NotAnInteger {
                name,
                value: v.clone(),
            })?;
            if (lo..=hi).contains(&n) {
                Ok(n)
            } else {
                Err(EnvError::OutOfRange {
                    name,
                    value: n,
                    lo,
                    hi,
                })
            }
        }
    }
}

/// `HCCL_IF_BASE_PORT`: [1024, 65520], default 60000.
pub fn base_port(env: &HashMap<String, String>) -> Result<u16, EnvError> {
    int_var(env, "HCCL_IF_BASE_PORT", 1024, 65520, 60000).map(|p| p as u16)
}

/// `HCCL_CONNECT_TIMEOUT` in seconds, default 120. HCCL requires ≥ 120 for RDMA link
/// setup; TCP needs less, so this engine accepts [1, 7200].
pub fn connect_timeout(env: &HashMap<String, String>) -> Result<Duration, EnvError> {
    int_var(env, "HCCL_CONNECT_TIMEOUT", 1, 7200, 120).map(Duration::from_secs)
}

/// `HCCL_EXEC_TIMEOUT` in seconds, default 1836; 0 means no timeout (a day here, so a
/// dead peer is still noticed eventually).
pub fn exec_timeout(env: &HashMap<String, String>) -> Result<Duration, EnvError> {
    int_var(env, "HCCL_EXEC_TIMEOUT", 0, 2_147_483_647, 1836).map(|s| {
        if s == 0 {
            Duration::from_secs(86_400)
        } else {
            Duration::from_secs(s)
        }
    })
}

/// `HCCL_RDMA_TC`: [0, 255], a multiple of 4 (DSCP × 4); used as the IP TOS byte.
pub fn traffic_class(env: &HashMap<String, String>) -> Result<Option<u32>, EnvError> {
    if !env.contains_key("HCCL_RDMA_TC") {
        return Ok(None);
    }
    let tc = int_var(env, "HCCL_RDMA_TC", 0, 255, 132)?;
    if tc % 4 != 0 {
        return Err(EnvError::TrafficClassNotDscp { value: tc });
    }
    Ok(Some(tc as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifs() -> Vec<Iface> {
        [
            ("docker0", "172.17.0.1"),
            ("enp3s0", "10.0.0.5"),
            ("eth0", "10.1.0.5"),
            ("eth1", "10.2.0.5"),
            ("lo", "127.0.0.1"),
        ]
        .into_iter()
        .map(|(n, a)| Iface {
            name: n.into(),
            addr: a.parse().unwrap(),
        })
        .collect()
    }

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn ifname_rules() {
        let i = ifs();
        assert_eq!(pick_by_ifname("eth", &i).unwrap().name, "eth0");
        assert_eq!(pick_by_ifname("enp,eth", &i).unwrap().name, "enp3s0");
        assert_eq!(pick_by_ifname("=eth1", &i).unwrap().name, "eth1");
        assert_eq!(pick_by_ifname("^docker,enp", &i).unwrap().name, "eth0");
        assert_eq!(pick_by_ifname("^=docker0", &i).unwrap().name, "enp3s0");
        assert!(pick_by_ifname("=eth", &i).is_none());
        assert_eq!(pick_default(&i).unwrap().name, "enp3s0");
        let only = vec![i[0].clone(), i[4].clone()];
        assert_eq!(pick_default(&only).unwrap().name, "docker0");
    }

    #[test]
    fn precedence_and_ranges() {
        let i = ifs();
        assert_eq!(
            root_ip(
                &env(&[("HCCL_IF_IP", "10.9.9.9"), ("HCCL_SOCKET_IFNAME", "eth")]),
                &i
            )
            .unwrap()
            .to_string(),
            "10.9.9.9"
        );
        assert_eq!(
            root_ip(&env(&[("HCCL_SOCKET_IFNAME", "=eth1")]), &i)
                .unwrap()
                .to_string(),
            "10.2.0.5"
        );
        assert!(
            root_ip(&env(&[("HCCL_IF_IP", "nope")]), &i)
                .unwrap_err()
                .to_string()
                .contains("HCCL_IF_IP")
        );
        assert_eq!(base_port(&env(&[])).unwrap(), 60000);
        assert!(
            base_port(&env(&[("HCCL_IF_BASE_PORT", "80")]))
                .unwrap_err()
                .to_string()
                .contains("outside [1024, 65520]")
        );
        assert_eq!(
            exec_timeout(&env(&[("HCCL_EXEC_TIMEOUT", "0")])).unwrap(),
            Duration::from_secs(86_400)
        );
        assert_eq!(
            traffic_class(&env(&[("HCCL_RDMA_TC", "132")])).unwrap(),
            Some(132)
        );
        assert!(
            traffic_class(&env(&[("HCCL_RDMA_TC", "130")]))
                .unwrap_err()
                .to_string()
                .contains("multiple of 4")
        );
    }
}
