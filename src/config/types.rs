//! The configuration's values that are more than their TOML type: addresses, the peer
//! throttle, the rank, the traffic class, the `HCCL_ALGO` override, OTLP headers.
//!
//! Each is parsed once, when the configuration is loaded: the loader checks the text
//! (every problem reported at once, among its section's checks), and the field holds the
//! parsed value, so no user parses it again. Each keeps the text it was written as, so that
//! it serializes back to what the file said (the SIGHUP diff compares those).
//!
//! "Unset" is `None` here. The file keeps its old spellings of unset (`""`, `-1`), so every
//! file that loaded before loads the same.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs as _};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::schema::ValueError;
use crate::collective::algo::select::{AlgoError, Override, parse_hccl_algo};

/// Serde as the text a value was written as (`Display`) and parsed from (`FromStr`).
macro_rules! text_serde {
    ($($t:ty),+) => {$(
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )+};
}

/// Why a listen address was refused.
#[derive(Debug, thiserror::Error)]
pub enum ListenAddrError {
    /// No `:port`.
    #[error("{text:?} has no port; write e.g. \":9478\" or \"127.0.0.1:9478\"")]
    NoPort {
        /// The address as written.
        text: String,
    },
    /// The port is not a 16-bit number.
    #[error("{text:?}: port {port:?} is not a number in 0..=65535")]
    Port {
        /// The address as written.
        text: String,
        /// The port part.
        port: String,
    },
    /// Nothing before the port.
    #[error("{text:?} has an empty host")]
    EmptyHost {
        /// The address as written.
        text: String,
    },
    /// The host name does not resolve.
    #[error("{text:?}: cannot resolve host {host:?}: {source}")]
    Resolve {
        /// The address as written.
        text: String,
        /// The host part.
        host: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// The host name resolves to nothing.
    #[error("{text:?}: host {host:?} resolves to no address")]
    NoAddress {
        /// The address as written.
        text: String,
        /// The host part.
        host: String,
    },
}

/// A listen address: `host:port`, `[v6]:port` or `:port` (all IPv4 interfaces). A host
/// name is resolved when the configuration is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddr {
    text: String,
    addr: SocketAddr,
}

impl ListenAddr {
    /// `:port`: every IPv4 interface.
    pub fn all_interfaces(port: u16) -> Self {
        Self {
            text: format!(":{port}"),
            addr: SocketAddr::from(([0, 0, 0, 0], port)),
        }
    }

    /// The address to bind.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for ListenAddr {
    type Err = ListenAddrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = || s.to_string();
        let full = match s.strip_prefix(':') {
            Some(port) => format!("0.0.0.0:{port}"),
            None => s.to_string(),
        };
        let ok = |addr| Self { text: text(), addr };
        if let Ok(a) = full.parse::<SocketAddr>() {
            return Ok(ok(a));
        }
        let Some((host, port)) = full.rsplit_once(':') else {
            return Err(ListenAddrError::NoPort { text: text() });
        };
        if port.parse::<u16>().is_err() {
            return Err(ListenAddrError::Port {
                text: text(),
                port: port.to_string(),
            });
        }
        if host.is_empty() {
            return Err(ListenAddrError::EmptyHost { text: text() });
        }
        let host = || host.to_string();
        full.to_socket_addrs()
            .map_err(|source| ListenAddrError::Resolve {
                text: text(),
                host: host(),
                source,
            })?
            .next()
            .map(ok)
            .ok_or_else(|| ListenAddrError::NoAddress {
                text: text(),
                host: host(),
            })
    }
}

/// Why an `IP:port` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not IP:port")]
pub struct PeerAddrError {
    /// The address as written.
    pub text: String,
}

/// A member's `IP:port`, as written in the member list (every member derives the group's
/// id and the default names from the text, so it is kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerAddr {
    text: String,
    addr: SocketAddr,
}

impl PeerAddr {
    /// The address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl From<SocketAddr> for PeerAddr {
    fn from(addr: SocketAddr) -> Self {
        Self {
            text: addr.to_string(),
            addr,
        }
    }
}

impl FromStr for PeerAddr {
    type Err = PeerAddrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let addr = s.parse().map_err(|_| PeerAddrError { text: s.into() })?;
        Ok(Self {
            text: s.to_string(),
            addr,
        })
    }
}

impl PartialEq<String> for PeerAddr {
    fn eq(&self, other: &String) -> bool {
        self.text == *other
    }
}

impl PartialEq<&str> for PeerAddr {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

/// Why a `host:port` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not host:port (e.g. \"hcclwatch.monitoring.svc.cluster.local:60100\")")]
pub struct DnsTargetError {
    /// The name as written.
    pub text: String,
}

/// A DNS name and port that resolve to every member (`collective.peers_dns`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsTarget {
    text: String,
    host: String,
    port: u16,
}

impl DnsTarget {
    /// The name to resolve.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port every member listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The target as written (every member derives the group's id from it).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for DnsTarget {
    type Err = DnsTargetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() => match port.parse::<u16>() {
                Ok(port) if port > 0 => Ok(Self {
                    text: s.to_string(),
                    host: host.to_string(),
                    port,
                }),
                _ => Err(DnsTargetError { text: s.into() }),
            },
            _ => Err(DnsTargetError { text: s.into() }),
        }
    }
}

/// Why a `probe.inject_peer_throttle` element was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerThrottleError {
    /// No `=`.
    #[error("expected IP:PORT=BYTES_PER_SECOND")]
    Form,
    /// The part before `=` is not an address.
    #[error("{0:?} is not IP:PORT")]
    Addr(String),
    /// The part after `=` is not a positive integer.
    #[error("{0:?} is not a positive number of bytes per second")]
    Rate(String),
}

/// A cap on this node's probe sends to one peer, `"IP:PORT=BYTES_PER_SECOND"` (fault
/// injection for tests and the demo).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerThrottle {
    text: String,
    addr: SocketAddr,
    rate: u64,
}

impl PeerThrottle {
    /// The peer's probe address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Bytes per second at most.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// The element as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for PeerThrottle {
    type Err = PeerThrottleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, rate) = s.split_once('=').ok_or(PeerThrottleError::Form)?;
        let addr = addr
            .trim()
            .parse()
            .map_err(|_| PeerThrottleError::Addr(addr.trim().into()))?;
        let rate = rate
            .trim()
            .parse()
            .ok()
            .filter(|r| *r > 0)
            .ok_or_else(|| PeerThrottleError::Rate(rate.trim().into()))?;
        Ok(Self {
            text: s.to_string(),
            addr,
            rate,
        })
    }
}

/// A parsed `HCCL_ALGO` value (`collective.algo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcclAlgo {
    text: String,
    plan: Override,
}

impl HcclAlgo {
    /// The algorithms it forces.
    pub fn plan(&self) -> &Override {
        &self.plan
    }

    /// The value as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for HcclAlgo {
    type Err = AlgoError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self {
            text: s.to_string(),
            plan: parse_hccl_algo(s)?,
        })
    }
}

/// Why an OTLP header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("is not name=value")]
pub struct OtlpHeaderError;

/// An extra OTLP request header, `name=value` (both trimmed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpHeader {
    text: String,
    name: String,
    value: String,
}

impl OtlpHeader {
    /// The header's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The header's value.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The header as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for OtlpHeader {
    type Err = OtlpHeaderError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() => Ok(Self {
                text: s.to_string(),
                name: name.trim().to_string(),
                value: value.trim().to_string(),
            }),
            _ => Err(OtlpHeaderError),
        }
    }
}

text_serde!(
    ListenAddr,
    PeerAddr,
    DnsTarget,
    PeerThrottle,
    HcclAlgo,
    OtlpHeader
);

/// This node's rank among the members (`collective.rank`; the file writes `-1` for
/// [`RankSpec::Auto`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RankSpec {
    /// Found by matching a member's address against this host's interfaces.
    #[default]
    Auto,
    /// This position in the member list.
    Fixed(u16),
}

impl Serialize for RankSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RankSpec::Auto => s.serialize_i64(-1),
            RankSpec::Fixed(r) => s.serialize_i64(i64::from(*r)),
        }
    }
}

impl<'de> Deserialize<'de> for RankSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match i64::deserialize(d)? {
            -1 => Ok(RankSpec::Auto),
            r => u16::try_from(r)
                .map(RankSpec::Fixed)
                .map_err(|_| serde::de::Error::custom(format!("rank {r} is out of range"))),
        }
    }
}

/// Why a traffic class was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} is not a multiple of 4 (it is DSCP × 4)")]
pub struct TrafficClassError(pub i64);

/// An `HCCL_RDMA_TC`-style traffic class: the IP TOS byte, DSCP × 4
/// (`collective.traffic_class`; the file writes `-1` for unset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrafficClass(u8);

impl TrafficClass {
    /// The TOS byte.
    pub fn tos(self) -> u32 {
        u32::from(self.0)
    }
}

impl TryFrom<i64> for TrafficClass {
    type Error = TrafficClassError;

    fn try_from(n: i64) -> Result<Self, Self::Error> {
        match u8::try_from(n) {
            Ok(b) if b % 4 == 0 => Ok(Self(b)),
            _ => Err(TrafficClassError(n)),
        }
    }
}

/// The file's spellings of "unset": `""` for a text value and `-1` for the traffic class.
pub(crate) mod unset {
    use super::*;

    /// `Option<T>` as text, `""` for `None`.
    pub mod empty {
        use super::*;

        /// `None` as `""`, else the value's text.
        pub fn serialize<T: fmt::Display, S: Serializer>(
            v: &Option<T>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match v {
                None => s.serialize_str(""),
                Some(v) => s.collect_str(v),
            }
        }

        /// `""` as `None`, else the value parsed.
        pub fn deserialize<'de, T, D>(d: D) -> Result<Option<T>, D::Error>
        where
            T: FromStr,
            T::Err: fmt::Display,
            D: Deserializer<'de>,
        {
            let text = String::deserialize(d)?;
            if text.is_empty() {
                return Ok(None);
            }
            text.parse().map(Some).map_err(serde::de::Error::custom)
        }
    }

    /// `Option<TrafficClass>`, `-1` for `None`.
    pub mod minus_one {
        use super::*;

        /// `None` as `-1`, else the TOS byte.
        pub fn serialize<S: Serializer>(v: &Option<TrafficClass>, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_i64(v.map_or(-1, |t| i64::from(t.0)))
        }

        /// `-1` as `None`, else a multiple of 4 in 0..=252.
        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<TrafficClass>, D::Error> {
            match i64::deserialize(d)? {
                -1 => Ok(None),
                n => TrafficClass::try_from(n)
                    .map(Some)
                    .map_err(serde::de::Error::custom),
            }
        }
    }
}

/// The checks the loader runs on a value whose TOML shape is right: the reasons it does not
/// parse into its type (see [`super::schema::Key::parse`]).
pub(crate) mod parse {
    use super::*;

    /// A string that must parse as `T`.
    pub fn text<T>(v: &toml::Value) -> Vec<ValueError>
    where
        T: FromStr,
        ValueError: From<T::Err>,
    {
        match v {
            toml::Value::String(s) => s
                .parse::<T>()
                .err()
                .map(ValueError::from)
                .into_iter()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A string that must be empty (unset) or parse as `T`.
    pub fn optional_text<T>(v: &toml::Value) -> Vec<ValueError>
    where
        T: FromStr,
        ValueError: From<T::Err>,
    {
        match v {
            toml::Value::String(s) if s.is_empty() => Vec::new(),
            v => text::<T>(v),
        }
    }

    /// `-1` (unset) or a traffic class.
    pub fn traffic_class(v: &toml::Value) -> Vec<ValueError> {
        match v {
            toml::Value::Integer(n) if *n != -1 => TrafficClass::try_from(*n)
                .err()
                .map(ValueError::from)
                .into_iter()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Every element a peer throttle; one problem per bad element.
    pub fn peer_throttles(v: &toml::Value) -> Vec<ValueError> {
        elements(v, |index, text| {
            text.parse::<PeerThrottle>()
                .err()
                .map(|error| ValueError::Throttle {
                    index,
                    text: text.to_string(),
                    error,
                })
        })
    }

    /// Every element an OTLP header; one problem per bad element.
    pub fn otlp_headers(v: &toml::Value) -> Vec<ValueError> {
        elements(v, |index, text| {
            text.parse::<OtlpHeader>()
                .err()
                .map(|_| ValueError::Header {
                    index,
                    text: text.to_string(),
                })
        })
    }

    fn elements(
        v: &toml::Value,
        check: impl Fn(usize, &str) -> Option<ValueError>,
    ) -> Vec<ValueError> {
        let toml::Value::Array(items) = v else {
            return Vec::new();
        };
        items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| check(i, item.as_str()?))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_address_forms() {
        let addr = |s: &str| s.parse::<ListenAddr>().map(|a| a.addr());
        assert_eq!(addr(":9478").unwrap(), "0.0.0.0:9478".parse().unwrap());
        assert_eq!(addr("127.0.0.1:1").unwrap(), "127.0.0.1:1".parse().unwrap());
        assert_eq!(addr("[::1]:9478").unwrap(), "[::1]:9478".parse().unwrap());
        assert!(addr("localhost:9478").is_ok());
        assert!(addr(":").is_err());
        assert_eq!(ListenAddr::all_interfaces(9478), ":9478".parse().unwrap());
        assert_eq!(":9478".parse::<ListenAddr>().unwrap().to_string(), ":9478");
    }

    #[test]
    fn peer_throttle_elements() {
        let t: PeerThrottle = " 127.0.0.1:4 = 7 ".parse().unwrap();
        assert_eq!((t.addr(), t.rate()), ("127.0.0.1:4".parse().unwrap(), 7));
        assert_eq!(t.to_string(), " 127.0.0.1:4 = 7 ");
        assert_eq!("x".parse::<PeerThrottle>(), Err(PeerThrottleError::Form));
        assert_eq!(
            "a=1".parse::<PeerThrottle>(),
            Err(PeerThrottleError::Addr("a".into()))
        );
        assert_eq!(
            "127.0.0.1:1=0".parse::<PeerThrottle>(),
            Err(PeerThrottleError::Rate("0".into()))
        );
    }

    #[test]
    fn dns_target_needs_a_host_and_a_port_above_zero() {
        let t: DnsTarget = "svc.local:60100".parse().unwrap();
        assert_eq!((t.host(), t.port()), ("svc.local", 60100));
        for bad in ["svc", ":1", "svc:0", "svc:65536", "svc:x"] {
            assert!(bad.parse::<DnsTarget>().is_err(), "{bad}");
        }
    }

    #[test]
    fn traffic_class_is_dscp_times_four() {
        assert_eq!(TrafficClass::try_from(96).map(TrafficClass::tos), Ok(96));
        assert_eq!(TrafficClass::try_from(130), Err(TrafficClassError(130)));
        assert_eq!(TrafficClass::try_from(256), Err(TrafficClassError(256)));
    }

    #[test]
    fn unset_spellings_round_trip() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct T {
            #[serde(with = "unset::empty")]
            dns: Option<DnsTarget>,
            #[serde(with = "unset::minus_one")]
            tc: Option<TrafficClass>,
            rank: RankSpec,
        }
        let t: T = toml::from_str("dns = \"\"\ntc = -1\nrank = -1\n").unwrap();
        assert_eq!(
            t,
            T {
                dns: None,
                tc: None,
                rank: RankSpec::Auto
            }
        );
        let text = toml::to_string(&t).unwrap();
        assert_eq!(text, "dns = \"\"\ntc = -1\nrank = -1\n");
        let t: T = toml::from_str("dns = \"a:1\"\ntc = 8\nrank = 3\n").unwrap();
        assert_eq!(t.dns.as_ref().map(DnsTarget::port), Some(1));
        assert_eq!(t.tc.map(TrafficClass::tos), Some(8));
        assert_eq!(t.rank, RankSpec::Fixed(3));
    }
}
