//! The handshake parse (`collective::transport::auth`): `parse_connect` and
//! `parse_acceptor_hello` are total and exact (a message parses only if it is the
//! fixed-length message, and its fields re-encode to the same bytes), and an acceptor
//! never authenticates a connector that does not hold the key: no input, however crafted,
//! passes `Acceptor::finish` without an HMAC made with the key.
#![no_main]

use hcclwatch::collective::transport::auth::{
    ACCEPTOR_HELLO_LEN, Acceptor, CONNECT_LEN, parse_acceptor_hello, parse_connect,
};
use libfuzzer_sys::fuzz_target;

/// The acceptor's key: the fuzzer never learns it except through the acceptor's answers,
/// which it does not see.
const KEY: &[u8] = b"fuzz: a key the connector does not hold";

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = parse_connect(data) {
        assert_eq!(data.len(), CONNECT_LEN);
        let mut again = b"HCWC".to_vec();
        again.extend_from_slice(&m.hello.encode());
        again.extend_from_slice(&m.nonce);
        again.extend_from_slice(&m.proof);
        assert_eq!(
            again, data,
            "a parsed connect message re-encodes to its bytes"
        );
    }
    if let Ok(nonce) = parse_acceptor_hello(data) {
        assert_eq!(data.len(), ACCEPTOR_HELLO_LEN);
        assert_eq!(&data[..4], b"HCWA");
        assert_eq!(&data[4..], &nonce);
    }
    // The acceptor's nonce is fixed here (so a crash reproduces), which only makes the
    // forger's task easier: it still cannot authenticate.
    let acceptor = Acceptor::with_nonce(7, [0x5a; 32]);
    assert_eq!(
        parse_acceptor_hello(&acceptor.hello()).ok(),
        Some([0x5a; 32])
    );
    assert!(
        acceptor.finish(KEY, data).is_err(),
        "a connector without the key authenticated"
    );
});
