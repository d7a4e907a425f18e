//! `collective::identity::Identity::check`: another member's proof of its identity, as it
//! arrives when a group forms (certificate mode). Any bytes are refused with a typed error
//! or accepted, without a panic and within the proof's bounds; a proof is accepted only
//! when it carries the fixture node's certificate (the one certificate of the fixture CA
//! valid for `node-a`) and a signature its key made over the statement, which the fuzzer
//! cannot forge. Inputs are either raw proofs, or a valid proof with bytes overwritten.
//!
//! The fixtures (fuzz/fixtures/identity-*) are a throwaway CA and node, made with openssl
//! for this target only (valid until 2126).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use hcclwatch::collective::identity::{Identity, Subject, statement};
use hcclwatch::config::identity::{IdentityFiles, from_pem};
use libfuzzer_sys::fuzz_target;

const CA: &str = include_str!("../fixtures/identity-ca.crt");
const CERT: &str = include_str!("../fixtures/identity-node-a.crt");
const KEY: &str = include_str!("../fixtures/identity-node-a.key");

struct Fixture {
    identity: Identity,
    statement: Vec<u8>,
    proof: Vec<u8>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let at = IdentityFiles {
            cert: PathBuf::from("identity-node-a.crt"),
            key: PathBuf::from("identity-node-a.key"),
            ca: PathBuf::from("identity-ca.crt"),
        };
        let identity = from_pem(CERT, KEY, CA, &at).expect("the fixture identity loads");
        let statement = statement(7, 1, 0, &[3u8; 32], &[5u8; 32]);
        let proof = identity.prove(&statement).expect("the fixture signs");
        let subject = Subject::Name("node-a".into());
        identity
            .check_now(&proof, &statement, &subject)
            .expect("the fixture's own proof holds");
        Fixture {
            identity,
            statement,
            proof,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let proof = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        // Overwrite the valid proof at (offset, byte) pairs.
        let mut p = f.proof.clone();
        for pair in rest.chunks_exact(3) {
            let at = usize::from(u16::from_le_bytes([pair[0], pair[1]])) % p.len();
            p[at] = pair[2];
        }
        p
    };
    let subject = Subject::Name("node-a".into());
    if let Ok(leaf) = f.identity.check_now(&proof, &f.statement, &subject) {
        assert_eq!(leaf, f.identity.leaf(), "accepted another certificate");
    }
    // Valid for another name, never.
    assert!(
        f.identity
            .check_now(&proof, &f.statement, &Subject::Name("node-b".into()))
            .is_err()
    );
});
