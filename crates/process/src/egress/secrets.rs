//! Secrets a turn never holds: it gets a placeholder (`sr-secret-<run>-<name>`) instead, and
//! the egress puts the real value in place of the placeholder on the requests that leave for a
//! host the secret is bound to, in the headers the secret names only.
//!
//! Where a secret may go is a list of [`SecretHost`]s: `host[:port]` exactly, or `*.domain[:port]`
//! for any name below `domain` (one label or more, never `domain` itself); without a port, 443.
//! Names compare lower case, without a trailing dot, internationalised names in their punycode
//! form; `*` and a wildcard over a single label (`*.com`) are refused.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use secrecy::{ExposeSecret as _, SecretString};

use super::policy::{normal_host, split_host_port};

/// The headers a secret goes into unless it names its own: where the model APIs and most
/// others take a key.
pub const DEFAULT_HEADERS: [&str; 4] = ["authorization", "x-api-key", "api-key", "x-goog-api-key"];

/// The port a [`SecretHost`] without one means.
const DEFAULT_PORT: u16 = 443;

/// One place a secret may be sent to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretHost {
    name: Name,
    port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Name {
    Exactly(String),
    /// `*.domain`: the domain, which has at least two labels.
    Below(String),
}

impl SecretHost {
    /// Reads `host[:port]` or `*.domain[:port]`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        let bad = || {
            format!(
                "'{raw}' is not a secret's host: write host[:port] or *.domain[:port] \
                 (e.g. api.github.com or *.example.com:8443)"
            )
        };
        let (host, port) = split_host_port(raw).ok_or_else(bad)?;
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("'{raw}': '{p}' is not a port (1-65535)"))?,
        };
        let name = match host.strip_prefix("*.") {
            Some(domain) => {
                let domain = normal_host(domain).ok_or_else(bad)?;
                if domain.parse::<std::net::IpAddr>().is_ok() || !domain.contains('.') {
                    return Err(format!(
                        "'{raw}' would send the secret to every name below '{domain}': name a \
                         domain of two labels or more (*.example.com)"
                    ));
                }
                Name::Below(domain)
            }
            None if host.contains('*') => return Err(bad()),
            None => Name::Exactly(normal_host(host).ok_or_else(bad)?),
        };
        Ok(Self { name, port })
    }

    /// Whether a request to `host:port` (already in [`normal_host`] form) may carry the secret.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        let Some(host) = normal_host(host) else {
            return false;
        };
        self.port == port
            && match &self.name {
                Name::Exactly(name) => *name == host,
                Name::Below(domain) => {
                    host.parse::<std::net::IpAddr>().is_err()
                        && host
                            .strip_suffix(domain.as_str())
                            .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
                }
            }
    }
}

impl fmt::Display for SecretHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match &self.name {
            Name::Exactly(name) if name.contains(':') => format!("[{name}]"),
            Name::Exactly(name) => name.clone(),
            Name::Below(domain) => format!("*.{domain}"),
        };
        if self.port == DEFAULT_PORT {
            f.write_str(&name)
        } else {
            write!(f, "{name}:{}", self.port)
        }
    }
}

impl serde::Serialize for SecretHost {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Longest secret name.
const MAX_NAME: usize = 64;

/// Whether `name` can name a secret: what a turn's variable may be called (`A-Z`, `0-9`, `_`,
/// not starting with a digit), at most 64 characters.
pub fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    match valid {
        true => Ok(()),
        false => Err(format!(
            "'{name}' is not a secret name: 1-{MAX_NAME} of A-Z, 0-9 and _, not starting with a \
             digit (it is the variable the turn gets, e.g. GITHUB_TOKEN)"
        )),
    }
}

/// What a turn sees instead of the secret `name` in run `run`: clearly not a key, and of the
/// length class of one.
pub fn placeholder(run: &str, name: &str) -> String {
    format!("sr-secret-{run}-{name}")
}

/// A secret's current value, asked for on every request that may carry it, so a rotation
/// takes effect on a running turn's next request.
pub trait Source: Send + Sync + fmt::Debug {
    /// `None`: the secret is gone (deleted since the turn started).
    fn value(&self) -> Pin<Box<dyn Future<Output = Option<SecretString>> + Send + '_>>;
}

/// A value that does not change while the service runs (an engine's configured key).
#[derive(Debug)]
pub struct Fixed(pub SecretString);

impl Source for Fixed {
    fn value(&self) -> Pin<Box<dyn Future<Output = Option<SecretString>> + Send + '_>> {
        Box::pin(std::future::ready(Some(self.0.clone())))
    }
}

/// A secret bound to a turn.
#[derive(Debug, Clone)]
pub struct Bound {
    pub name: String,
    /// What the turn holds instead of the value.
    pub placeholder: String,
    /// Where the value may go; empty for an engine's key, which its model door alone carries.
    pub hosts: Vec<SecretHost>,
    /// The request headers the placeholder is replaced in (lower case).
    pub headers: Vec<HeaderName>,
    /// Put before the value when a header holds the bare placeholder (e.g. `Bearer `).
    pub prefix: Option<String>,
    pub source: Arc<dyn Source>,
}

/// What [`Bound::inject`] did to a request.
#[derive(Debug, Clone)]
pub enum Injected {
    /// The request did not carry the placeholder in the secret's headers.
    NotAsked,
    /// The value went in (it is masked in the answer, should the host echo it).
    Yes(SecretString),
    /// It did, but the secret no longer exists: the placeholder went on as it was.
    Missing,
}

impl Bound {
    /// Whether the secret may go to `host:port`.
    pub fn goes_to(&self, host: &str, port: u16) -> bool {
        self.hosts.iter().any(|h| h.matches(host, port))
    }

    /// Replaces the placeholder with the value in the secret's headers of `headers` (in no
    /// other header, never in a body or query string). A header that is the bare placeholder
    /// becomes `prefix` + value.
    pub async fn inject(&self, headers: &mut HeaderMap) -> Injected {
        let carries = |v: &HeaderValue| {
            v.to_str()
                .is_ok_and(|text| text.contains(self.placeholder.as_str()))
        };
        if !self
            .headers
            .iter()
            .any(|name| headers.get_all(name).iter().any(carries))
        {
            return Injected::NotAsked;
        }
        let Some(secret) = self.source.value().await else {
            return Injected::Missing;
        };
        let value = secret.expose_secret();
        for name in &self.headers {
            let replaced: Vec<HeaderValue> = headers
                .get_all(name)
                .iter()
                .map(|v| match v.to_str() {
                    Ok(text) if text == self.placeholder => {
                        format!("{}{value}", self.prefix.as_deref().unwrap_or(""))
                    }
                    Ok(text) => text.replace(self.placeholder.as_str(), value),
                    Err(_) => String::new(),
                })
                .filter_map(|text| HeaderValue::from_str(&text).ok())
                .map(|mut v| {
                    v.set_sensitive(true);
                    v
                })
                .collect();
            if replaced.is_empty() {
                continue;
            }
            headers.remove(name);
            for v in replaced {
                headers.append(name.clone(), v);
            }
        }
        Injected::Yes(secret)
    }
}

/// Parses header names given as text (`Authorization`, `x-api-key`).
pub fn header_names<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<HeaderName>, String> {
    names
        .into_iter()
        .map(|n| {
            HeaderName::from_bytes(n.trim().to_ascii_lowercase().as_bytes())
                .map_err(|_| format!("'{n}' is not an HTTP header name"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(raw: &str) -> SecretHost {
        SecretHost::parse(raw).unwrap()
    }

    #[test]
    fn wildcards_match_names_below_the_domain_only() {
        let below = host("*.example.com");
        assert!(below.matches("a.example.com", 443));
        assert!(below.matches("a.b.example.com", 443));
        assert!(
            below.matches("A.B.EXAMPLE.COM.", 443),
            "case and trailing dot"
        );
        assert!(!below.matches("example.com", 443), "never the bare domain");
        assert!(!below.matches("evil-example.com", 443));
        assert!(!below.matches("example.com.evil.net", 443));
        assert!(!below.matches("aexample.com", 443));
        assert!(
            !below.matches("a.example.com", 8443),
            "443 unless a port is named"
        );
        assert!(host("*.example.com:8443").matches("a.example.com", 8443));
        // A wildcard names host names, never an address.
        let numeric = host("*.example.com");
        assert!(!numeric.matches("1.2.3.4", 443));
    }

    #[test]
    fn exact_hosts_are_normalised() {
        let exact = host("API.GitHub.com.");
        assert!(exact.matches("api.github.com", 443));
        assert!(!exact.matches("x.api.github.com", 443));
        assert_eq!(exact.to_string(), "api.github.com");
        let idn = host("bücher.example");
        assert!(idn.matches("xn--bcher-kva.example", 443), "punycode");
        assert!(idn.matches("BÜCHER.example", 443));
        assert_eq!(idn.to_string(), "xn--bcher-kva.example");
        assert!(host("127.0.0.1:4443").matches("127.0.0.1", 4443));
        assert_eq!(host("[::1]:4443").to_string(), "[::1]:4443");
    }

    #[test]
    fn wildcards_over_everything_are_refused() {
        for raw in [
            "*",
            "*.com",
            "*.",
            "a.*.com",
            "*.1.2.3.4",
            "",
            "a.com:0",
            "a.com:x",
        ] {
            assert!(SecretHost::parse(raw).is_err(), "{raw}");
        }
    }

    fn bound(prefix: Option<&str>) -> Bound {
        Bound {
            name: "T".into(),
            placeholder: placeholder("run-1", "T"),
            hosts: vec![host("api.example.com")],
            headers: header_names(["Authorization"]).unwrap(),
            prefix: prefix.map(str::to_owned),
            source: Arc::new(Fixed("s3cret".to_owned().into())),
        }
    }

    #[tokio::test]
    async fn only_the_named_headers_get_the_value() {
        let b = bound(None);
        let mut headers = HeaderMap::new();
        headers.insert(
            "authorization",
            format!("Bearer {}", b.placeholder).parse().unwrap(),
        );
        headers.insert("x-echo", b.placeholder.parse().unwrap());
        assert!(matches!(b.inject(&mut headers).await, Injected::Yes(_)));
        assert_eq!(headers["authorization"], "Bearer s3cret");
        assert!(headers["authorization"].is_sensitive());
        assert_eq!(
            headers["x-echo"],
            b.placeholder.as_str(),
            "other headers keep it"
        );
        let mut plain = HeaderMap::new();
        plain.insert("x-echo", b.placeholder.parse().unwrap());
        assert!(matches!(b.inject(&mut plain).await, Injected::NotAsked));
    }

    #[tokio::test]
    async fn a_bare_placeholder_gets_the_prefix() {
        let b = bound(Some("Bearer "));
        let mut headers = HeaderMap::new();
        headers.insert("authorization", b.placeholder.parse().unwrap());
        b.inject(&mut headers).await;
        assert_eq!(headers["authorization"], "Bearer s3cret");
    }
}
