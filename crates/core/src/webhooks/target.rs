//! Where a webhook may go: an `http(s)` URL whose host resolves only to public addresses.
//!
//! A webhook's URL is a request the service makes on a tenant's behalf from inside its own
//! network, so a target that resolves to loopback, a private or link-local network, carrier-
//! grade NAT or a cloud's metadata address is refused: when the webhook is created (or a job
//! names it as `callback_url`), and again at each delivery, where the address checked is the
//! one connected to (no second lookup, no redirect followed). The operator may allow some
//! `host[:port]` despite these rules (`SKILL_RUNNER_WEBHOOK_ALLOW`; tests on loopback need it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The `host[:port]` targets the operator allows despite the address rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowed(Vec<(String, Option<u16>)>);

impl Allowed {
    /// Reads `SKILL_RUNNER_WEBHOOK_ALLOW`: comma-separated `host[:port]` (`[v6]:port`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut entries = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let parsed = url::Url::parse(&format!("http://{entry}/"))
                .ok()
                .filter(|u| u.path() == "/" && u.username().is_empty())
                .and_then(|u| Some((u.host_str()?.to_ascii_lowercase(), u.port())))
                .ok_or_else(|| format!("'{entry}' is not host[:port]"))?;
            entries.push(parsed);
        }
        Ok(Self(entries))
    }

    fn admits(&self, host: &str, port: u16) -> bool {
        self.0
            .iter()
            .any(|(h, p)| h == host && p.is_none_or(|p| p == port))
    }
}

/// A checked target: its URL and the addresses a delivery may connect to.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: url::Url,
    pub host: String,
    pub addrs: Vec<SocketAddr>,
}

/// Checks the form of a webhook URL: `http` or `https`, a host, no user or password, no
/// fragment; a literal address must be a public one.
pub fn check_url(text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text).map_err(|e| format!("'{text}' is not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "'{text}' must be an http:// or https:// URL, not {}:",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("a webhook URL carries no user or password (deliveries are signed)".into());
    }
    if url.fragment().is_some() {
        return Err("a webhook URL has no #fragment".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("'{text}' names no host"));
    }
    Ok(url)
}

/// Resolves `text`'s host and checks every address it gives, unless `allowed` admits the
/// host and port; the error says which address broke which rule.
pub async fn resolve(text: &str, allowed: &Allowed) -> Result<Target, String> {
    let url = check_url(text)?;
    let host = match url.host() {
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        Some(host) => host.to_string().to_ascii_lowercase(),
        None => return Err(format!("'{text}' names no host")),
    };
    let port = url
        .port_or_known_default()
        .ok_or_else(|| format!("'{text}' has no port"))?;
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| format!("the host '{host}' does not resolve ({e})"))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(format!("the host '{host}' resolves to no address"));
    }
    let shown = match url.host() {
        Some(url::Host::Ipv6(_)) => format!("[{host}]"),
        _ => host.clone(),
    };
    if !allowed.admits(&shown, port) && !allowed.admits(&host, port) {
        for addr in &addrs {
            if let Some(why) = forbidden(addr.ip()) {
                return Err(format!(
                    "'{shown}' resolves to {} ({why}): webhooks go to public addresses only \
                     (an operator may allow this target with SKILL_RUNNER_WEBHOOK_ALLOW)",
                    addr.ip()
                ));
            }
        }
    }
    Ok(Target { url, host, addrs })
}

/// Why a webhook may not reach `ip`, if it may not.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => {
            // An IPv4 address written as IPv6 (`::ffff:127.0.0.1`, NAT64) is that address.
            if let Some(v4) = v6.to_ipv4_mapped() {
                return forbidden_v4(v4);
            }
            let s = v6.segments();
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                let v4 =
                    Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
                return forbidden_v4(v4);
            }
            forbidden_v6(v6)
        }
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("a private network")
    } else if ip.is_link_local() {
        Some("link-local, where cloud metadata services answer")
    } else if a == 100 && (64..128).contains(&b) {
        Some("carrier-grade NAT")
    } else if ip.is_unspecified() || a == 0 {
        Some("this network")
    } else if ip.is_broadcast() || ip.is_multicast() || a >= 240 {
        Some("not a unicast address")
    } else if a == 192 && b == 0 && ip.octets()[2] == 0 {
        Some("IETF protocol assignments")
    } else if a == 198 && (18..20).contains(&b) {
        Some("benchmarking")
    } else {
        None
    }
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("this network")
    } else if first & 0xfe00 == 0xfc00 {
        Some("a private network (unique local)")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if ip.is_multicast() {
        Some("not a unicast address")
    } else if ip.to_ipv4().is_some() {
        // `::a.b.c.d`, the deprecated compatible form.
        Some("an IPv4-compatible address")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn private_and_special_targets_are_refused_unless_allowed() {
        let none = Allowed::default();
        for url in [
            "http://localhost/hook",
            "http://127.0.0.1:9000/",
            "http://10.0.0.1/",
            "http://172.16.5.4/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data",
            "http://100.64.0.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[fd00::1]/",
            "http://[fe80::1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://0.0.0.0/",
        ] {
            let refused = resolve(url, &none).await.unwrap_err();
            assert!(
                refused.contains("public addresses only"),
                "{url}: {refused}"
            );
        }
        let target = resolve("https://93.184.215.14/x", &none).await.unwrap();
        assert_eq!(target.addrs, ["93.184.215.14:443".parse().unwrap()]);
        let allowed = Allowed::parse("127.0.0.1:9000, localhost, [::1]:81").unwrap();
        assert!(resolve("http://127.0.0.1:9000/", &allowed).await.is_ok());
        assert!(
            resolve("http://127.0.0.1:9001/", &allowed).await.is_err(),
            "another port"
        );
        assert!(
            resolve("http://localhost:5/", &allowed).await.is_ok(),
            "any port"
        );
        assert!(resolve("http://[::1]:81/", &allowed).await.is_ok());
    }

    #[test]
    fn urls_are_http_with_a_host_and_no_credentials() {
        for (url, says) in [
            ("ftp://example.com/", "http:// or https://"),
            ("http://user:pw@example.com/", "no user or password"),
            ("http://example.com/#x", "no #fragment"),
            ("not a url", "is not a URL"),
        ] {
            assert!(check_url(url).unwrap_err().contains(says), "{url}");
        }
        assert!(Allowed::parse("http://x/").is_err());
    }
}
