//! Who a turn may reach: the `host:port` targets of its allow-list, the operator's host
//! patterns (`SKILL_RUNNER_EGRESS_ALLOW`) that decide which targets a skill may ask for, and the
//! addresses nobody reaches unless that exact `host:port` was allowed (loopback, private,
//! link-local, metadata).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One `host:port` a turn may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Lower case, without a trailing dot or IPv6 brackets.
    pub host: String,
    pub port: u16,
    /// Whether the target may resolve to an internal address ([`is_internal`]): only for a
    /// target named exactly (the engine's configured endpoint, an operator entry without
    /// wildcards), never for one a wildcard let through.
    pub internal_ok: bool,
}

impl Target {
    /// Reads `host:port` (`[v6]:port` for IPv6 literals); the port is required.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        let (host, port) = split_host_port(raw)
            .ok_or_else(|| format!("'{raw}' is not host:port (e.g. api.github.com:443)"))?;
        let port = port
            .ok_or_else(|| format!("'{raw}' has no port (write it as {raw}:443)"))?
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("'{raw}' has no valid port (1-65535)"))?;
        let host = normal_host(host).ok_or_else(|| format!("'{raw}' has no valid host name"))?;
        Ok(Self {
            host,
            port,
            internal_ok: false,
        })
    }

    /// The target of a URL (`http://host[:port]/...`; the scheme's port when it has none).
    pub fn of_url(url: &str) -> Option<Self> {
        let (scheme, rest) = url.split_once("://")?;
        let default = match scheme.to_ascii_lowercase().as_str() {
            "http" | "ws" => 80,
            "https" | "wss" => 443,
            _ => return None,
        };
        let authority = rest.split(['/', '?', '#']).next()?;
        let authority = authority.rsplit('@').next()?;
        let (host, port) = split_host_port(authority)?;
        let port = match port {
            Some(p) => p.parse().ok()?,
            None => default,
        };
        Some(Self {
            host: normal_host(host)?,
            port,
            internal_ok: false,
        })
    }

    /// The same target, allowed to resolve to internal addresses.
    pub fn exact(mut self) -> Self {
        self.internal_ok = true;
        self
    }

    /// Whether `host:port` is this target.
    pub fn is(&self, host: &str, port: u16) -> bool {
        self.port == port && normal_host(host).is_some_and(|h| h == self.host)
    }

    /// The address of a host that is an IP literal.
    pub fn literal(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// Whether the host is this machine's loopback (a literal or `localhost`).
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.literal().is_some_and(|ip| ip.is_loopback())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Splits `host[:port]` / `[v6][:port]`.
pub(crate) fn split_host_port(raw: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = raw.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    match raw.rsplit_once(':') {
        // A bare IPv6 literal has several colons and no port.
        Some((host, _)) if host.contains(':') => Some((raw, None)),
        Some((host, port)) => Some((host, Some(port))),
        None => Some((raw, None)),
    }
}

/// A host name or IP literal in the one form targets are compared in (lower case, no trailing
/// dot, an internationalised name as its punycode `xn--` form); `None` if it is neither.
pub(crate) fn normal_host(host: &str) -> Option<String> {
    let host = host.trim().trim_end_matches('.');
    let host = if host.is_ascii() {
        host.to_ascii_lowercase()
    } else {
        idna::domain_to_ascii(host).ok()?
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(ip.to_string());
    }
    let valid = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    valid.then_some(host)
}

/// One entry of `SKILL_RUNNER_EGRESS_ALLOW`: `host`, `*.domain` or `*`, with `:port` or
/// without (any port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    host: HostMatch,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Any,
    /// `*.example.com`: any name below `example.com` (not `example.com` itself).
    Below(String),
    Exactly(String),
}

impl HostPattern {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        let (host, port) = split_host_port(raw)
            .ok_or_else(|| format!("'{raw}' is not a host pattern (host[:port], *.domain, *)"))?;
        let port = match port {
            None | Some("*") => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| format!("'{raw}': '{p}' is not a port (1-65535 or *)"))?,
            ),
        };
        let bad = || format!("'{raw}' is not a host pattern (host[:port], *.domain, *)");
        let host = match host {
            "*" => HostMatch::Any,
            _ => match host.strip_prefix("*.") {
                Some(domain) => HostMatch::Below(normal_host(domain).ok_or_else(bad)?),
                None => HostMatch::Exactly(normal_host(host).ok_or_else(bad)?),
            },
        };
        Ok(Self { host, port })
    }

    /// Reads a comma-separated list (blank entries skipped).
    pub fn parse_list(raw: &str) -> Result<Vec<Self>, String> {
        raw.split(',')
            .filter(|e| !e.trim().is_empty())
            .map(Self::parse)
            .collect()
    }

    fn matches(&self, target: &Target) -> bool {
        self.port.is_none_or(|p| p == target.port)
            && match &self.host {
                HostMatch::Any => true,
                // A wildcard names host names, never an address (`*.2.3.4` is not `1.2.3.4`).
                HostMatch::Below(domain) => {
                    target.literal().is_none()
                        && target
                            .host
                            .strip_suffix(domain.as_str())
                            .is_some_and(|head| head.ends_with('.'))
                }
                HostMatch::Exactly(host) => *host == target.host,
            }
    }

    /// Whether this entry names exactly one `host:port` (no wildcard).
    fn is_exact(&self) -> bool {
        matches!(self.host, HostMatch::Exactly(_)) && self.port.is_some()
    }
}

/// Which of the targets a skill declares (`runner.json` `network.allow`) the operator's
/// patterns permit: the permitted ones (allowed to reach internal addresses only when an entry
/// names them exactly), or the first one refused.
pub fn permitted(declared: &[Target], operator: &[HostPattern]) -> Result<Vec<Target>, Target> {
    declared
        .iter()
        .map(|target| {
            let mut entries = operator.iter().filter(|p| p.matches(target)).peekable();
            entries.peek().ok_or_else(|| target.clone())?;
            let exact = entries.any(HostPattern::is_exact);
            Ok(Target {
                internal_ok: exact,
                ..target.clone()
            })
        })
        .collect()
}

/// Addresses a turn reaches only through a target allowed exactly: this machine (loopback,
/// unspecified), private networks (RFC 1918, CGNAT, IPv6 unique-local), link-local (the cloud
/// metadata address 169.254.169.254 among them), AWS's IPv6 metadata `fd00:ec2::254`,
/// multicast and broadcast. An IPv4-mapped IPv6 address counts as its IPv4 address.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => internal_v4(v4),
            None => internal_v6(v6),
        },
    }
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        // 100.64.0.0/10, carrier-grade NAT (provider-internal networks).
        || (a == 100 && (64..128).contains(&b))
        // 0.0.0.0/8, "this network".
        || a == 0
}

fn internal_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        // fc00::/7 unique-local, which holds fd00:ec2::254.
        || (first & 0xfe00) == 0xfc00
        // fe80::/10 link-local.
        || (first & 0xffc0) == 0xfe80
}

/// Why a connection was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The `host:port` is not on the turn's allow-list.
    NotAllowed,
    /// It is, but resolves only to internal addresses and was not allowed exactly.
    Internal(IpAddr),
    /// The name does not resolve.
    Unresolved(String),
    /// A request the proxy does not take (not CONNECT nor absolute-form `http://`).
    BadRequest(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotAllowed => f.write_str(
                "not on the turn's allow-list (the engine's endpoint, and the skill's \
                 runner.json network.allow entries that SKILL_RUNNER_EGRESS_ALLOW permits)",
            ),
            Refusal::Internal(ip) => write!(
                f,
                "resolves to the internal address {ip} (loopback, private, link-local or \
                 metadata), reachable only when SKILL_RUNNER_EGRESS_ALLOW names this exact \
                 host:port"
            ),
            Refusal::Unresolved(why) => write!(f, "does not resolve: {why}"),
            Refusal::BadRequest(why) => write!(f, "not a proxy request: {why}"),
        }
    }
}

/// The allowed target `host:port` is, if any.
pub fn allowed<'a>(allow: &'a [Target], host: &str, port: u16) -> Result<&'a Target, Refusal> {
    allow
        .iter()
        .find(|t| t.is(host, port))
        .ok_or(Refusal::NotAllowed)
}

/// The addresses of `addresses` the target may be reached at, in order; refused when none is.
pub fn reachable(
    target: &Target,
    addresses: impl IntoIterator<Item = IpAddr>,
) -> Result<Vec<IpAddr>, Refusal> {
    let mut refused = None;
    let ok: Vec<IpAddr> = addresses
        .into_iter()
        .filter(|ip| {
            let internal = is_internal(*ip) && !target.internal_ok;
            if internal {
                refused.get_or_insert(*ip);
            }
            !internal
        })
        .collect();
    match (ok.is_empty(), refused) {
        (false, _) => Ok(ok),
        (true, Some(ip)) => Err(Refusal::Internal(ip)),
        (true, None) => Err(Refusal::Unresolved("no address".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn internal_addresses_are_recognized_without_sending_anything() {
        for internal in [
            "127.0.0.1",
            "127.0.0.2",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.0.1",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_internal(ip(internal)), "{internal} is internal");
        }
        for public in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(!is_internal(ip(public)), "{public} is public");
        }
    }

    #[test]
    fn only_exact_targets_reach_internal_addresses() {
        let named = Target::parse("api.example.com:443").unwrap();
        assert_eq!(
            reachable(&named, [ip("169.254.169.254")]),
            Err(Refusal::Internal(ip("169.254.169.254")))
        );
        assert_eq!(
            reachable(&named, [ip("10.0.0.1"), ip("93.184.216.34")]),
            Ok(vec![ip("93.184.216.34")]),
            "internal addresses are skipped, public ones kept"
        );
        let exact = named.clone().exact();
        assert_eq!(
            reachable(&exact, [ip("10.0.0.1")]),
            Ok(vec![ip("10.0.0.1")])
        );
        assert!(matches!(reachable(&named, []), Err(Refusal::Unresolved(_))));
    }

    #[test]
    fn targets_parse_and_compare_in_one_form() {
        let t = Target::parse("API.GitHub.com.:443").unwrap();
        assert_eq!(t.to_string(), "api.github.com:443");
        assert!(t.is("api.github.com", 443));
        assert!(t.is("API.GITHUB.COM.", 443));
        assert!(!t.is("api.github.com", 80));
        let v6 = Target::parse("[::1]:8080").unwrap();
        assert_eq!(v6.host, "::1");
        assert!(v6.is_loopback());
        assert_eq!(v6.to_string(), "[::1]:8080");
        assert!(
            Target::parse("api.github.com")
                .unwrap_err()
                .contains("no port")
        );
        assert!(Target::parse("api.github.com:0").is_err());
        assert!(Target::parse("bad host:1").is_err());
        assert!(Target::parse("a/b:1").is_err());
        let url = Target::of_url("http://127.0.0.1:4010/v1").unwrap();
        assert_eq!((url.host.as_str(), url.port), ("127.0.0.1", 4010));
        assert!(url.is_loopback());
        let url = Target::of_url("https://user@API.example.com/x?y").unwrap();
        assert_eq!((url.host.as_str(), url.port), ("api.example.com", 443));
        assert_eq!(Target::of_url("ftp://x"), None);
    }

    #[test]
    fn operator_patterns_permit_declared_targets() {
        let operator =
            HostPattern::parse_list("api.github.com:443, *.example.com, 127.0.0.1:9000").unwrap();
        let declared: Vec<Target> = ["api.github.com:443", "a.b.example.com:8443"]
            .iter()
            .map(|t| Target::parse(t).unwrap())
            .collect();
        let ok = permitted(&declared, &operator).unwrap();
        assert!(ok[0].internal_ok, "named exactly");
        assert!(!ok[1].internal_ok, "let through by a wildcard");
        let refused =
            permitted(&[Target::parse("example.com:443").unwrap()], &operator).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "example.com:443",
            "*.domain is below it"
        );
        assert!(permitted(&[Target::parse("api.github.com:80").unwrap()], &operator).is_err());
        assert!(
            permitted(&declared, &[]).is_err(),
            "nothing is permitted by default"
        );
        let any = HostPattern::parse_list("*").unwrap();
        assert!(!permitted(&declared, &any).unwrap()[0].internal_ok);
        assert!(HostPattern::parse("*.:1").is_err());
        let numeric = HostPattern::parse("*.2.3.4").unwrap();
        assert!(!numeric.matches(&Target::parse("1.2.3.4:80").unwrap()));
        assert!(HostPattern::parse("a.com:x").is_err());
        assert_eq!(HostPattern::parse("a.com:*").unwrap().port, None);
    }

    #[test]
    fn the_allow_list_is_matched_by_host_and_port() {
        let allow = vec![Target::parse("api.github.com:443").unwrap()];
        assert!(allowed(&allow, "API.github.com", 443).is_ok());
        assert_eq!(
            allowed(&allow, "api.github.com", 80),
            Err(Refusal::NotAllowed)
        );
        assert_eq!(
            allowed(&allow, "169.254.169.254", 80),
            Err(Refusal::NotAllowed)
        );
    }
}
