//! A throwaway certificate authority for tests of HTTPS: servers get leaves it signs, and
//! clients (or a service under test, through `ca.pem`) trust it, so TLS is verified for real
//! with no system trust store and no network.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// A self-signed CA of one test; its certificate is written to `ca.pem` in a temp dir it owns,
/// so a process under test can be pointed at the file.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pem: String,
    pem_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestCa {
    pub fn new() -> Self {
        // A name of its own: a verifier meeting another test CA of the same name would find
        // a bad signature rather than an unknown issuer.
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "skill-runner test CA {}.{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let pem = issuer.pem();
        let dir = tempfile::tempdir().unwrap();
        let pem_path = dir.path().join("ca.pem");
        std::fs::write(&pem_path, &pem).unwrap();
        Self {
            issuer,
            pem,
            pem_path,
            _dir: dir,
        }
    }

    /// Where the CA certificate (PEM) is, for processes that take a CA bundle path.
    pub fn ca_pem_path(&self) -> &Path {
        &self.pem_path
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.pem
    }

    /// A server configuration whose leaf, signed by this CA, is valid for `names` (DNS names,
    /// or IP addresses for names that parse as such). ALPN offers HTTP/1.1 only, which every
    /// server of this crate speaks.
    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        if let Some(first) = names.first() {
            params.distinguished_name.push(DnType::CommonName, *first);
        }
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().unwrap();
        let leaf = params.signed_by(&key, &self.issuer).unwrap();
        let chain = vec![leaf.der().clone(), self.issuer.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }

    /// A client builder that trusts this CA alone (no system roots), for tests that add
    /// their own settings (a proxy, no redirects).
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        crate::install_crypto_provider();
        let ca = reqwest::Certificate::from_pem(self.pem.as_bytes()).unwrap();
        reqwest::Client::builder().tls_certs_only([ca])
    }

    /// A client that trusts this CA alone.
    pub fn client(&self) -> reqwest::Client {
        self.client_builder().build().unwrap()
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_ca_certificate() {
        let ca = TestCa::new();
        let pem = std::fs::read_to_string(ca.ca_pem_path()).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        assert_eq!(pem, ca.ca_pem());
        let dir = ca.ca_pem_path().parent().unwrap().to_owned();
        drop(ca);
        assert!(!dir.exists(), "the temp dir goes with the CA");
    }

    #[tokio::test]
    async fn fake_model_over_tls() {
        let ca = TestCa::new();
        let model = crate::FakeModel::start_tls(&ca);
        assert!(
            model.base.starts_with("https://127.0.0.1:"),
            "{}",
            model.base
        );
        assert!(model.requests().await.is_empty());
        let (status, body) = model
            .post(
                "/v1/chat/completions",
                serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("all done"), "{body}");
        let requests = model.requests().await;
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0]["path"], "/v1/chat/completions");

        // Also by name, and not for a client without the CA.
        let port = model.base.rsplit(':').next().unwrap();
        let log = format!("https://localhost:{port}/__log");
        let response = ca.client().get(&log).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(TestCa::new().client().get(&log).send().await.is_err());
    }

    #[test]
    fn server_config_speaks_http1_only() {
        let ca = TestCa::new();
        let config = ca.server_config(&["localhost", "127.0.0.1"]);
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
