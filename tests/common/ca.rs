//! A test certificate authority (rcgen) that issues node certificates, as PEM files a
//! provider would write or as the engine's in-memory identity.

use std::path::Path;
use std::sync::Arc;

use hcclwatch::collective::identity::Identity;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A CA of its own for one test.
pub struct TestCa {
    pem: String,
    der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    /// A fresh CA.
    pub fn new() -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `name` and its key, as PEM.
    pub fn issue(&self, name: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// An identity for `name`, in memory.
    pub fn identity(&self, name: &str) -> Arc<Identity> {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        let der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
        Arc::new(Identity::new(vec![cert.der().clone()], &der, vec![self.der.clone()]).unwrap())
    }

    /// Writes `file`.crt and `file`.key with a certificate for `cert_for`, and ca.crt, into
    /// `dir`; returns the `[collective]` lines that name them.
    pub fn files(&self, dir: &Path, file: &str, cert_for: &str) -> String {
        let (cert, key) = self.issue(cert_for);
        let (c, k, a) = (
            dir.join(format!("{file}.crt")),
            dir.join(format!("{file}.key")),
            dir.join("ca.crt"),
        );
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        std::fs::write(&a, &self.pem).unwrap();
        format!(
            "identity_cert_file = \"{}\"\nidentity_key_file = \"{}\"\nidentity_ca_file = \"{}\"\n",
            c.display(),
            k.display(),
            a.display()
        )
    }
}
