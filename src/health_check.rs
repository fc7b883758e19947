//! `skill-runner health`: the container image's health check. It asks the service for
//! `/readyz` where the same settings make it listen (`SKILL_RUNNER_BIND`, `PORT`), so the check
//! follows the address an operator chose instead of assuming port 8000, and it needs nothing
//! but the binary (no curl, no Node).

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// How long connecting, and then each read or write, may take; a container runtime's own
/// timeout for the check (3 s in the Dockerfile) ends it anyway.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Most bytes of the answer read: `/readyz` answers a short JSON object.
const ANSWER_BYTES: u64 = 16 * 1024;

/// Whether the service listening on `bind` says it is ready; why not, when it is not.
pub fn check(bind: SocketAddr) -> Result<(), String> {
    let target = dialable(bind);
    let mut stream = TcpStream::connect_timeout(&target, TIMEOUT)
        .map_err(|e| format!("cannot connect to the service at {target}: {e}"))?;
    let exchange = |stream: &mut TcpStream| -> std::io::Result<Vec<u8>> {
        stream.set_read_timeout(Some(TIMEOUT))?;
        stream.set_write_timeout(Some(TIMEOUT))?;
        write!(
            stream,
            "GET /readyz HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"
        )?;
        let mut answer = Vec::new();
        stream.take(ANSWER_BYTES).read_to_end(&mut answer)?;
        Ok(answer)
    };
    let answer = exchange(&mut stream)
        .map_err(|e| format!("no answer from the service at {target}: {e}"))?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.split_whitespace().nth(1).unwrap_or_default();
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body.trim());
    match status {
        "200" => Ok(()),
        "" => Err(format!("the service at {target} sent no HTTP answer")),
        _ => Err(format!("{target}/readyz answered {status}: {body}")),
    }
}

/// A service bound to every interface is reached on loopback.
fn dialable(bind: SocketAddr) -> SocketAddr {
    let ip = match bind.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, bind.port())
}
