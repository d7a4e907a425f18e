//! Finding the peers: HCCL's root-info exchange, HCCL rank-table files, or a static list,
//! plus HCCL's environment rules for picking the interface and ports.

pub mod env;
pub mod ranktable;
pub mod rootinfo;
