//! Serving a turn's doors: each connection the turn opens is read (a proxy request) or taken
//! as it is (a bridge, a model door), checked against the turn's allow-list and the address
//! rules, connected from the service's own network to the one address the name resolved to, and
//! copied both ways, or, for a model door and a `CONNECT` to a host a secret is bound to,
//! forwarded request by request ([`super::forward`]); every connection, allowed or not, is one
//! line in the turn's egress log.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::forward::{self, Upstream};
use super::policy::{self, Refusal, Target};
use super::secrets::Bound;
use super::{Door, Egress, EgressLog, Line};

/// Largest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;
/// How long a turn may take to send its request head, and the proxy to connect.
const STEP_LIMIT: Duration = Duration::from_secs(15);

/// Accepts on `listener` until `cancel` fires, then waits until every connection has ended
/// (cut short by the same `cancel`) and logged its line.
pub async fn serve(
    listener: TcpListener,
    door: Door,
    egress: Arc<Egress>,
    cancel: CancellationToken,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((conn, _)) => {
                    let door = door.clone();
                    let egress = egress.clone();
                    let cancel = cancel.clone();
                    connections.spawn(async move {
                        connection(conn, &door, &egress, &cancel).await;
                    });
                }
                // A turn that opens too many connections at once: wait for some to end.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            // Reaps finished connections as they end, so a long turn holds no list of them.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    while connections.join_next().await.is_some() {}
}

/// Serves one connection of the turn, and logs it.
async fn connection(mut conn: TcpStream, door: &Door, egress: &Egress, cancel: &CancellationToken) {
    let _ = conn.set_nodelay(true);
    let log = &egress.log;
    let mut line = Line::new(door);
    let opened = tokio::select! {
        () = cancel.cancelled() => return,
        opened = open(&mut conn, door, egress, &mut line) => opened,
    };
    let (upstream, early) = match opened {
        Ok(Opened::Tunnel(upstream, early)) => (upstream, early),
        Ok(Opened::Forward(upstream, secrets)) => {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = forward::serve(conn, upstream, secrets, log.clone()) => {}
            }
            return;
        }
        Ok(Opened::Terminate(upstream, secrets, early)) => {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = terminate(conn, early, upstream, secrets, egress, line) => {}
            }
            return;
        }
        Err(Failure::Refused(refusal)) => {
            let _ = respond(&mut conn, door, "403 Forbidden", &refusal.to_string()).await;
            log.denied(line, &refusal).await;
            return;
        }
        Err(Failure::Upstream(why)) => {
            let _ = respond(&mut conn, door, "502 Bad Gateway", &why).await;
            line.verdict = "failed";
            line.reason = Some(why);
            log.record(&line).await;
            return;
        }
    };
    let sent = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    tokio::select! {
        () = cancel.cancelled() => {}
        () = pump(conn, upstream, early, sent.clone(), received.clone()) => {}
    }
    line.bytes_sent = sent.load(Ordering::Relaxed);
    line.bytes_received = received.load(Ordering::Relaxed);
    log.record(&line).await;
}

enum Failure {
    Refused(Refusal),
    Upstream(String),
}

/// What a connection of the turn became.
enum Opened {
    /// A connection to the upstream, and the bytes to send it first.
    Tunnel(TcpStream, Vec<u8>),
    /// A model door's: its requests go to the engine's endpoint with its key.
    Forward(Upstream, Arc<[Bound]>),
    /// A `CONNECT` to a host secrets are bound to (and the bytes that followed it): the proxy
    /// terminates its TLS and forwards its requests with them.
    Terminate(Upstream, Arc<[Bound]>, Vec<u8>),
}

/// Reads what the turn asks for (a bridge or model door asks for its one target), checks it and
/// connects.
async fn open(
    conn: &mut TcpStream,
    door: &Door,
    egress: &Egress,
    line: &mut Line,
) -> Result<Opened, Failure> {
    let allow = egress.allow.as_slice();
    let (host, port, early, connect) = match door {
        Door::Model(model) => return door_upstream(model, egress).await,
        Door::Bridge(target) => (target.host.clone(), target.port, Vec::new(), false),
        Door::Proxy => {
            let asked = tokio::time::timeout(STEP_LIMIT, read_request(conn))
                .await
                .map_err(|_| refused("no request head within 15 s"))?
                .map_err(|e| refused(&e))?;
            line.method = Some(asked.method.clone());
            (
                asked.host,
                asked.port,
                asked.forward,
                asked.method == "CONNECT",
            )
        }
    };
    line.host = host.clone();
    line.port = port;
    let target = policy::allowed(allow, &host, port).map_err(Failure::Refused)?;
    let addresses = resolve(target).await.map_err(Failure::Refused)?;
    let addresses = policy::reachable(target, addresses).map_err(Failure::Refused)?;
    let bound: Arc<[Bound]> = egress
        .bound
        .iter()
        .filter(|b| b.goes_to(&host, port))
        .cloned()
        .collect();
    if let (true, false, Some(tls)) = (connect, bound.is_empty(), &egress.tls) {
        line.address = addresses.first().copied();
        conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .map_err(|e| Failure::Upstream(e.to_string()))?;
        let upstream = Upstream {
            target: target.clone(),
            tls: Some(tls.upstream.clone()),
            addresses,
            check_host: true,
            via: "proxy",
            calls: None,
        };
        return Ok(Opened::Terminate(upstream, bound, early));
    }
    let mut last = String::from("no address");
    for ip in addresses {
        let address = SocketAddr::new(ip, port);
        match tokio::time::timeout(STEP_LIMIT, TcpStream::connect(address)).await {
            Ok(Ok(upstream)) => {
                let _ = upstream.set_nodelay(true);
                line.address = Some(ip);
                if connect {
                    conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await
                        .map_err(|e| Failure::Upstream(e.to_string()))?;
                }
                return Ok(Opened::Tunnel(upstream, early));
            }
            Ok(Err(e)) => last = format!("connecting to {address}: {e}"),
            Err(_) => last = format!("connecting to {address}: no answer within 15 s"),
        }
    }
    Err(Failure::Upstream(last))
}

/// Terminates the TLS of a `CONNECT`ed connection with a certificate for its host, once its
/// client hello names that host (SNI), and forwards its requests with `secrets`. A hello for
/// another name ends the connection: the request would be judged by one host and sent to
/// another.
async fn terminate(
    conn: TcpStream,
    early: Vec<u8>,
    upstream: Upstream,
    secrets: Arc<[Bound]>,
    egress: &Egress,
    mut line: Line,
) {
    let tls = egress.tls.as_ref().expect("only with TLS");
    let (read, write) = conn.into_split();
    let io = tokio::io::join(std::io::Cursor::new(early).chain(read), write);
    let acceptor = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io);
    let started = match tokio::time::timeout(STEP_LIMIT, acceptor).await {
        Ok(Ok(started)) => started,
        Ok(Err(e)) => return failed(&egress.log, line, format!("TLS: {e}")).await,
        Err(_) => {
            return failed(&egress.log, line, "no TLS client hello within 15 s".into()).await;
        }
    };
    let host = &upstream.target.host;
    let sni = started.client_hello().server_name().map(str::to_owned);
    let agrees = match &sni {
        Some(name) => upstream.target.is(name, upstream.target.port),
        // A client sends no name for an IP address.
        None => upstream.target.literal().is_some(),
    };
    if !agrees {
        let refusal = Refusal::BadRequest(format!(
            "the TLS client hello names {}, not {host}, the CONNECT target",
            sni.as_deref().unwrap_or("no host")
        ));
        egress.log.denied(line, &refusal).await;
        return;
    }
    let config = match tls.terminate(host) {
        Ok(config) => config,
        Err(why) => return failed(&egress.log, line, why).await,
    };
    let stream = match tokio::time::timeout(STEP_LIMIT, started.into_stream(config)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return failed(&egress.log, line, format!("TLS: {e}")).await,
        Err(_) => return failed(&egress.log, line, "no TLS handshake within 15 s".into()).await,
    };
    line.reason = Some("terminated: the requests follow, each a line of its own".into());
    egress.log.record(&line).await;
    forward::serve(stream, upstream, secrets, egress.log.clone()).await;
}

async fn failed(log: &EgressLog, mut line: Line, why: String) {
    line.verdict = "failed";
    line.reason = Some(why);
    log.record(&line).await;
}

/// A model door's connection: its requests go to the engine's endpoint (allowed exactly) with
/// its key.
async fn door_upstream(model: &super::ModelDoor, egress: &Egress) -> Result<Opened, Failure> {
    let addresses = resolve(&model.upstream).await.map_err(Failure::Refused)?;
    let addresses = policy::reachable(&model.upstream, addresses).map_err(Failure::Refused)?;
    let tls = match (model.tls, &egress.tls) {
        (false, _) => None,
        (true, Some(tls)) => Some(tls.upstream.clone()),
        (true, None) => return Err(Failure::Upstream("no TLS client".into())),
    };
    let upstream = Upstream {
        target: model.upstream.clone(),
        tls,
        addresses,
        check_host: false,
        via: "door",
        calls: Some(model.calls.clone()),
    };
    Ok(Opened::Forward(upstream, Arc::new([model.key.clone()])))
}

fn refused(why: &str) -> Failure {
    Failure::Refused(Refusal::BadRequest(why.to_owned()))
}

/// The addresses of the target's host, looked up once: the connection goes to one of these,
/// so a name cannot be re-resolved to somewhere else between the check and the connect.
async fn resolve(target: &Target) -> Result<Vec<IpAddr>, Refusal> {
    if let Some(ip) = target.literal() {
        return Ok(vec![ip]);
    }
    let found = tokio::time::timeout(
        STEP_LIMIT,
        tokio::net::lookup_host((target.host.as_str(), target.port)),
    )
    .await
    .map_err(|_| Refusal::Unresolved("no answer within 15 s".into()))?
    .map_err(|e| Refusal::Unresolved(e.to_string()))?;
    let mut ips: Vec<IpAddr> = Vec::new();
    for address in found {
        if !ips.contains(&address.ip()) {
            ips.push(address.ip());
        }
    }
    Ok(ips)
}

/// What a proxy request asks for.
#[derive(Debug, PartialEq, Eq)]
struct Asked {
    method: String,
    host: String,
    port: u16,
    /// For an `http://` request: its head in origin form, and whatever followed it.
    forward: Vec<u8>,
}

/// Reads a request head: `CONNECT host:port` or an absolute-form `http://` request.
async fn read_request(conn: &mut TcpStream) -> Result<Asked, String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = conn.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the connection closed before a request".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(asked) = parse_request(&buf)? {
            return Ok(asked);
        }
        if buf.len() > MAX_HEAD {
            return Err(format!("a request head over {MAX_HEAD} bytes"));
        }
    }
}

/// Parses a complete request head in `buf` (`None`: not complete yet).
fn parse_request(buf: &[u8]) -> Result<Option<Asked>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let head_len = match request.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("unreadable request head: {e}")),
    };
    let method = request.method.unwrap_or_default().to_owned();
    let uri = request.path.unwrap_or_default();
    if method == "CONNECT" {
        let target = Target::parse(uri).map_err(|e| format!("CONNECT {e}"))?;
        return Ok(Some(Asked {
            method,
            host: target.host,
            port: target.port,
            forward: buf[head_len..].to_vec(),
        }));
    }
    if !uri
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
    {
        return Err(format!(
            "'{method} {uri}': only CONNECT host:port and http:// URLs go through the proxy"
        ));
    }
    let target = Target::of_url(uri).ok_or_else(|| format!("'{uri}' has no valid host"))?;
    let after_authority = &uri[7..];
    let path = after_authority
        .find(['/', '?'])
        .map_or("/", |i| &after_authority[i..]);
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let mut head = format!(
        "{method} {path} HTTP/1.{}\r\n",
        request.version.unwrap_or(1)
    )
    .into_bytes();
    for header in request.headers.iter() {
        // Meant for the proxy, not the server.
        if header.name.eq_ignore_ascii_case("proxy-connection")
            || header.name.eq_ignore_ascii_case("proxy-authorization")
        {
            continue;
        }
        head.extend_from_slice(header.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(header.value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head.extend_from_slice(&buf[head_len..]);
    Ok(Some(Asked {
        method,
        host: target.host,
        port: target.port,
        forward: head,
    }))
}

/// Answers a refused or failed proxy request (a bridge's turn just sees the connection close).
async fn respond(
    conn: &mut TcpStream,
    door: &Door,
    status: &str,
    why: &str,
) -> std::io::Result<()> {
    if matches!(door, Door::Bridge(_)) {
        return Ok(());
    }
    let body = format!("skill-runner egress: {why}\n");
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(answer.as_bytes()).await?;
    conn.shutdown().await
}

/// Copies both ways until both sides are done, counting the bytes.
async fn pump(
    conn: TcpStream,
    upstream: TcpStream,
    early: Vec<u8>,
    sent: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
) {
    let (turn_read, turn_write) = conn.into_split();
    let (up_read, mut up_write) = upstream.into_split();
    let outbound = async {
        if up_write.write_all(&early).await.is_ok() {
            sent.fetch_add(early.len() as u64, Ordering::Relaxed);
            copy_counting(turn_read, &mut up_write, &sent).await;
        }
        let _ = up_write.shutdown().await;
    };
    let inbound = async {
        let mut turn_write = turn_write;
        copy_counting(up_read, &mut turn_write, &received).await;
        let _ = turn_write.shutdown().await;
    };
    tokio::join!(outbound, inbound);
}

async fn copy_counting(
    mut from: impl AsyncRead + Unpin,
    to: &mut (impl AsyncWrite + Unpin),
    count: &AtomicU64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_requests_name_their_target() {
        let asked = parse_request(b"CONNECT API.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\nhello")
            .unwrap()
            .unwrap();
        assert_eq!(asked.method, "CONNECT");
        assert_eq!((asked.host.as_str(), asked.port), ("api.example.com", 443));
        assert_eq!(asked.forward, b"hello");
    }

    #[test]
    fn absolute_form_requests_are_forwarded_in_origin_form() {
        let asked = parse_request(
            b"POST http://127.0.0.1:4010/v1/chat?x=1 HTTP/1.1\r\nHost: 127.0.0.1:4010\r\n\
              Proxy-Connection: keep-alive\r\nContent-Length: 2\r\n\r\n{}",
        )
        .unwrap()
        .unwrap();
        assert_eq!((asked.host.as_str(), asked.port), ("127.0.0.1", 4010));
        assert_eq!(
            String::from_utf8(asked.forward).unwrap(),
            "POST /v1/chat?x=1 HTTP/1.1\r\nHost: 127.0.0.1:4010\r\nContent-Length: 2\r\n\r\n{}"
        );
        let bare = parse_request(b"GET http://example.com HTTP/1.0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(bare.forward.starts_with(b"GET / HTTP/1.0\r\n"));
        assert_eq!(bare.port, 80);
    }

    #[test]
    fn other_requests_are_refused_or_wait_for_more() {
        assert_eq!(parse_request(b"CONNECT a.com:443 HTTP/1.1\r\n"), Ok(None));
        assert!(parse_request(b"GET /v1 HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_request(b"GET https://a.com/ HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_request(b"CONNECT a.com HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_request(b"\x16\x03\x01garbage\r\n\r\n").is_err());
    }
}
