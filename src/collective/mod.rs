//! An HCCL-compatible collective engine over TCP.
//!
//! hcclwatch probes the network between nodes with the same collectives a training job
//! runs, so a probe sees what HCCL would see: [`Communicator`] offers all-reduce,
//! all-gather, reduce-scatter, broadcast, reduce, all-to-all, send/recv and barrier, with
//! HCCL's argument conventions, data-type and operator codes ([`dtype`]) and result codes
//! ([`error`]). Algorithms ([`algo`]) are HCCL's: ring, recursive halving-doubling,
//! binomial tree and pairwise exchange, chosen by α-β cost or by `HCCL_ALGO`. The
//! [`transport`] is authenticated TCP with several connections per peer; [`bootstrap`]
//! finds the peers (root info, rank table, static list).
//!
//! This module knows nothing about metrics or DCMI; it is usable as a library on its own.

pub mod algo;
pub mod authorship;
pub mod bootstrap;
pub(crate) mod comm;
pub mod dtype;
pub(crate) mod error;
pub mod identity;
pub mod timeline;
pub mod transport;

pub use comm::{CommConfig, Communicator};
pub use dtype::{DataType, ReduceOp};
pub use error::{CollError, CollResult, HcclCode};
