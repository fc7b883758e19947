//! Which names the service answers to (`Host`), against DNS rebinding.
//!
//! A page on `evil.example` can point its own name at `127.0.0.1` after the browser looked it
//! up once; its scripts then read `http://evil.example:8000/v1/...` as same-origin, and reach a
//! service that listens on loopback only. Such a request still says `Host: evil.example`, so
//! every route refuses a `Host` that is not this service's: on a loopback bind, `localhost`,
//! `127.0.0.1`, `::1` and the bound address; on a specific address, that address; plus the
//! names in `SKILL_RUNNER_ALLOWED_HOSTS` (exact, `*.domain`, or `*` for any). A service bound
//! to every interface (`0.0.0.0`, `::`) with no list answers any name: behind a proxy or in a
//! container it is reached by names it cannot know, and a browser rebinding to loopback does
//! not reach it there unless it also listens on loopback, which is what the list is for.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

/// The names a service bound to one address answers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts {
    /// `None`: any name.
    names: Option<Vec<String>>,
}

impl AllowedHosts {
    /// The names for a service bound to `bind`, plus `extra` (`SKILL_RUNNER_ALLOWED_HOSTS`).
    pub fn new(bind: SocketAddr, extra: &[String]) -> Self {
        let extra: Vec<String> = extra.iter().map(|n| normal(n)).collect();
        if extra.iter().any(|n| n == "*") || (bind.ip().is_unspecified() && extra.is_empty()) {
            return Self { names: None };
        }
        let mut names = extra;
        let ip = bind.ip();
        if !ip.is_unspecified() {
            names.push(normal(&ip.to_string()));
        }
        if ip.is_loopback() {
            names.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
        }
        Self { names: Some(names) }
    }

    /// Whether a request that says `Host: host` is for this service.
    pub fn permits(&self, host: &str) -> bool {
        let Some(names) = &self.names else {
            return true;
        };
        let name = normal(strip_port(host));
        names
            .iter()
            .any(|allowed| match allowed.strip_prefix("*.") {
                Some(domain) => name
                    .strip_suffix(domain)
                    .is_some_and(|rest| rest.ends_with('.')),
                None => *allowed == name,
            })
    }
}

/// Lower case, without a trailing dot or IPv6 brackets.
fn normal(name: &str) -> String {
    let name = name.trim().trim_end_matches('.');
    let name = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    match name.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => name.to_ascii_lowercase(),
    }
}

/// `host` without its `:port` (`[::1]:8000` → `[::1]`).
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        // More than one colon: a bare IPv6 address.
        Some((name, port)) if !name.contains(':') && port.parse::<u16>().is_ok() => name,
        _ => host,
    }
}

/// The middleware.
pub async fn guard(
    State(allowed): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    match host {
        Some(host) if !allowed.permits(&host) && !crate::PROBES.contains(&request.uri().path()) => {
            crate::detail(
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "Host '{host}' is not one this service answers to; an operator who reaches it \
                 by that name adds it to SKILL_RUNNER_ALLOWED_HOSTS"
                ),
            )
        }
        // HTTP/1.0 clients may send none; a browser always does.
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::AllowedHosts;

    #[test]
    fn a_loopback_service_answers_to_its_own_names_only() {
        let allowed = AllowedHosts::new("127.0.0.1:8000".parse().unwrap(), &[]);
        for host in [
            "127.0.0.1:8000",
            "localhost",
            "LOCALHOST:8000",
            "localhost.:1",
            "[::1]:8000",
        ] {
            assert!(allowed.permits(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8000",
            "127.0.0.1.evil.example",
            "localhost.evil.example:8000",
            "10.0.0.1:8000",
        ] {
            assert!(!allowed.permits(host), "{host}");
        }
    }

    #[test]
    fn operators_add_names_and_wildcards() {
        let extra = ["runner.internal".to_owned(), "*.corp.example".to_owned()];
        let allowed = AllowedHosts::new("10.1.2.3:8000".parse().unwrap(), &extra);
        for host in ["10.1.2.3:8000", "runner.internal", "a.corp.example:443"] {
            assert!(allowed.permits(host), "{host}");
        }
        for host in [
            "localhost",
            "corp.example",
            "evilcorp.example",
            "x.runner.internal",
        ] {
            assert!(!allowed.permits(host), "{host}");
        }
        // Every interface and no list: any name; `*`: any name anywhere.
        let any = AllowedHosts::new("0.0.0.0:8000".parse().unwrap(), &[]);
        assert!(any.permits("skill-runner:8000"));
        let star = AllowedHosts::new("127.0.0.1:8000".parse().unwrap(), &["*".to_owned()]);
        assert!(star.permits("evil.example"));
        // A list on every interface is the list alone.
        let listed = AllowedHosts::new("0.0.0.0:8000".parse().unwrap(), &extra);
        assert!(!listed.permits("evil.example") && listed.permits("runner.internal"));
    }
}
