//! The egress's TLS: the service's own CA, which signs a certificate for each host the proxy
//! terminates TLS for (hosts a turn's secret is bound to), and the client side that connects to
//! the real host, verifying it against the system's roots and the operator's extra CA bundle.
//!
//! The CA is created at first start and kept in the data dir: its key in `egress-ca/` (the
//! service's own, mode 0700, which no turn may read), its certificate also in `egress-trust/`
//! with a bundle of the system's roots plus it, which turns that hold a secret read through
//! `SSL_CERT_FILE` and the like ([`Tls::trust_env`]). Both trust files are rewritten at each
//! start: a turn cannot write there, but nothing the service serves is read back unchecked.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Distinguished name of the CA; part of what a reloaded key is an issuer under.
const CA_NAME: &str = "skill-runner egress CA";
/// Most leaf certificates kept; beyond it the cache starts over.
const MAX_LEAVES: usize = 1024;
/// Where the system's roots are on the usual distributions, the first one found wins.
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The egress's TLS, both sides.
pub struct Tls {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    ca_der: CertificateDer<'static>,
    ca_pem: String,
    trust: PathBuf,
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
    /// How the proxy connects to real hosts.
    pub upstream: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("trust", &self.trust).finish()
    }
}

impl Tls {
    /// Loads the CA kept under `data_dir` (creating it on first start) and trusts the system's
    /// roots plus the certificates of `extra_roots` (PEM) for upstream connections.
    pub fn load(data_dir: &Path, extra_roots: Option<&Path>) -> std::io::Result<Self> {
        use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
        let private = data_dir.join("egress-ca");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&private)?;
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700))?;
        let key_file = private.join("key.pem");
        let key = match std::fs::read_to_string(&key_file) {
            Ok(pem) => rcgen::KeyPair::from_pem(&pem).map_err(|e| {
                std::io::Error::other(format!("{}: not a key: {e}", key_file.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = rcgen::KeyPair::generate().map_err(std::io::Error::other)?;
                crate::run_folder::write_new_private(&key_file, key.serialize_pem().as_bytes())?;
                key
            }
            Err(e) => return Err(e),
        };
        let cert_file = private.join("ca.pem");
        let ca_pem = match std::fs::read_to_string(&cert_file) {
            Ok(pem) => pem,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let pem = ca_params()
                    .self_signed(&key)
                    .map_err(std::io::Error::other)?
                    .pem();
                crate::run_folder::write_new_private(&cert_file, pem.as_bytes())?;
                pem
            }
            Err(e) => return Err(e),
        };
        let ca_der = CertificateDer::from_pem_slice(ca_pem.as_bytes()).map_err(|e| {
            std::io::Error::other(format!("{}: not a certificate: {e}", cert_file.display()))
        })?;
        let trust = data_dir.join("egress-trust");
        std::fs::create_dir_all(&trust)?;
        std::fs::set_permissions(&trust, std::fs::Permissions::from_mode(0o755))?;
        replace_public(&trust.join("ca.pem"), ca_pem.as_bytes())?;
        let system = SYSTEM_BUNDLES
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        replace_public(
            &trust.join("bundle.pem"),
            format!("{}\n{ca_pem}", system.trim_end()).as_bytes(),
        )?;
        Ok(Self {
            issuer: rcgen::Issuer::new(ca_params(), key),
            ca_der,
            ca_pem,
            trust,
            leaves: Mutex::new(HashMap::new()),
            upstream: upstream_config(extra_roots)?,
        })
    }

    /// The CA's certificate (PEM), which clients of the proxy trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The folder turns read the CA from.
    pub fn trust_dir(&self) -> &Path {
        &self.trust
    }

    /// The variables that make a turn's programs trust the CA besides the system's roots.
    pub fn trust_env(&self) -> Vec<(String, String)> {
        let bundle = self.trust.join("bundle.pem").to_string_lossy().into_owned();
        let ca = self.trust.join("ca.pem").to_string_lossy().into_owned();
        let mut env: Vec<(String, String)> = [
            "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "GIT_SSL_CAINFO",
            "AWS_CA_BUNDLE",
            "CODEX_CA_CERTIFICATE",
            "DENO_CERT",
        ]
        .into_iter()
        .map(|k| (k.to_owned(), bundle.clone()))
        .collect();
        // Node adds these to its own roots.
        env.push(("NODE_EXTRA_CA_CERTS".to_owned(), ca));
        env
    }

    /// The server side of a connection the proxy terminates for `host`: a certificate for it,
    /// signed by the CA, offering HTTP/1.1 only.
    pub fn terminate(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, String> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(config) = leaves.get(host) {
            return Ok(config.clone());
        }
        let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params =
            rcgen::CertificateParams::new(vec![host.to_owned()]).map_err(|e| e.to_string())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, host);
        params.use_authority_key_identifier_extension = true;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| e.to_string())?;
        let key = PrivateKeyDer::try_from(key.serialize_der()).map_err(str::to_owned)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), self.ca_der.clone()], key)
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if leaves.len() >= MAX_LEAVES {
            leaves.clear();
        }
        leaves.insert(host.to_owned(), config.clone());
        Ok(config)
    }
}

/// The name a TLS connection to `host` verifies (a DNS name or an IP address).
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_owned()).map_err(|e| format!("'{host}': {e}"))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn ca_params() -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, CA_NAME);
    params
}

/// The client side: the system's roots plus `extra_roots`, HTTP/1.1.
fn upstream_config(extra_roots: Option<&Path>) -> std::io::Result<Arc<rustls::ClientConfig>> {
    let extra: Vec<CertificateDer<'static>> = match extra_roots {
        Some(path) => CertificateDer::pem_file_iter(path)
            .and_then(Iterator::collect)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?,
        None => Vec::new(),
    };
    let verifier = rustls_platform_verifier::Verifier::new_with_extra_roots(extra, provider())
        .map_err(std::io::Error::other)?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Replaces `path` with a new file holding `bytes`, readable by everyone (turns read it).
fn replace_public(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    crate::run_folder::write_atomic_blocking(path, bytes)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_kept_and_its_key_stays_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let first = Tls::load(dir.path(), None).unwrap();
        let again = Tls::load(dir.path(), None).unwrap();
        assert_eq!(
            first.ca_pem(),
            again.ca_pem(),
            "created once, then reloaded"
        );
        let key = dir.path().join("egress-ca/key.pem");
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let trust: Vec<String> = std::fs::read_dir(again.trust_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!trust.iter().any(|f| f.contains("key")), "{trust:?}");
        let bundle = std::fs::read_to_string(again.trust_dir().join("bundle.pem")).unwrap();
        assert!(bundle.ends_with(again.ca_pem()));
        // A leaf of the reloaded CA verifies under the first one's certificate.
        let config = again.terminate("api.example.com").unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert!(Arc::ptr_eq(
            &config,
            &again.terminate("api.example.com").unwrap()
        ));
    }
}
