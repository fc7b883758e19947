//! How the service (and the example client) take HTTP connections, so that no client can hold
//! the service: a header-read timeout that also bounds a keep-alive connection's idle time
//! between requests, a minimum rate and a deadline for request bodies
//! ([`crate::body_deadline`]), a cap on open connections in all and from one address, and an
//! accept loop that outlives running out of descriptors.
//!
//! Past a cap, a new connection gets a second to send its request's head; a probe
//! ([`crate::PROBES`]: health, readiness, ping) is served all the same, so an orchestrator
//! still sees the node, and anything else is answered a fixed `503` (`Retry-After: 1`) and
//! closed; at most [`TURNED_AWAY`] such connections are handled at once, and the rest are
//! closed unanswered. Should `accept` still
//! fail for want of descriptors (`EMFILE`, `ENFILE`: the turns' pipes and the logs share the
//! process's table), one descriptor kept in reserve is given up to take the waiting connection,
//! answer it the same `503` and close it, and is taken back: the kernel's queue keeps moving,
//! and the service answers normally again as soon as descriptors free up.
//!
//! At shutdown, the listener closes, connections that have not sent a byte yet are dropped
//! (each would otherwise hold the shutdown for its whole header timeout), and requests under
//! way get [`DRAIN`] to finish; what is still open then is cut, so a client never decides how
//! long the service takes to stop.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use crate::body_deadline::BodyLimits;
use crate::body_deadline::Deadline;
use crate::tally::Tally;

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// The bounds on connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections at most (`SKILL_RUNNER_MAX_CONNECTIONS`).
    pub max: usize,
    /// Open connections from one client address at most
    /// (`SKILL_RUNNER_MAX_CONNECTIONS_PER_ADDRESS`).
    pub max_per_address: usize,
    /// Time a client has to send a request's headers, counted from the connection's start or
    /// from the end of the previous response (`SKILL_RUNNER_HEADER_TIMEOUT_SECONDS`).
    pub header_read_timeout: Duration,
    /// How fast and how long a request's body may come.
    pub body: BodyLimits,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max: 4096,
            max_per_address: 2048,
            header_read_timeout: Duration::from_secs(30),
            body: BodyLimits::default(),
        }
    }
}

/// Bytes hyper buffers per connection, each way.
const CONNECTION_BUFFER: usize = 64 * 1024;

/// How long requests under way at shutdown may take to finish.
pub const DRAIN: Duration = Duration::from_secs(5);

/// Connections past the cap answered at once; more are closed unanswered.
const TURNED_AWAY: usize = 256;

/// What a connection past the cap is told.
static BUSY: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    let body = r#"{"detail":"Too many open connections: the service is busy, retry in a second"}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
         Retry-After: 1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
});

/// Serves `app` on `listener` until `shutdown` resolves, then lets requests under way finish
/// within [`DRAIN`].
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // What a connection buffers either way: a request's head must fit (nginx takes 32 KiB),
        // and a response a client does not read holds at most this much here beside the
        // kernel's socket buffer (hyper's default, 400 KiB, made each idle event stream cost
        // that much).
        .max_buf_size(CONNECTION_BUFFER);
    let builder = Arc::new(builder);
    let permits = Arc::new(Semaphore::new(limits.max));
    let by_address = Arc::new(Tally::<IpAddr>::default());
    let turning_away = Arc::new(Semaphore::new(TURNED_AWAY));
    let graceful = GracefulShutdown::new();
    let closing = CancellationToken::new();
    let mut reserve = Reserve::take();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    reserve.short = false;
                    (stream, peer)
                }
                Err(e) => {
                    on_accept_error(&listener, &mut reserve, e).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        // Handlers read the client's address as axum's `ConnectInfo`; every body is held to
        // its rate and deadline.
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            app.clone(),
            move |request: axum::http::Request<hyper::body::Incoming>| {
                let (mut parts, body) = request.into_parts();
                parts.extensions.insert(axum::extract::ConnectInfo(peer));
                // A request without a body (most of them) needs no timer.
                let body = match hyper::body::Body::is_end_stream(&body) {
                    true => axum::body::Body::new(body),
                    false => axum::body::Body::new(Deadline::new(body, limits.body)),
                };
                axum::http::Request::from_parts(parts, body)
            },
        ));
        let slot = by_address.take(peer.ip(), limits.max_per_address);
        let permit = permits.clone().try_acquire_owned();
        let (Some(slot), Ok(permit)) = (slot, permit) else {
            if let Ok(turning) = turning_away.clone().try_acquire_owned() {
                tokio::spawn(async move {
                    turn_away(stream, service).await;
                    drop(turning);
                });
            }
            continue;
        };
        let (builder, watcher) = (builder.clone(), graceful.watcher());
        let closing = closing.clone();
        tokio::spawn(async move {
            // The first request's first byte: until it comes, hyper only waits to tell HTTP/1
            // from HTTP/2, with no timer (its header timeout covers every later wait).
            let mut byte = [0u8; 1];
            let first = tokio::select! {
                first = tokio::time::timeout(limits.header_read_timeout, stream.peek(&mut byte)) => first,
                () = closing.cancelled() => return,
            };
            if matches!(first, Ok(Ok(1))) {
                let connection = builder
                    .serve_connection_with_upgrades(TokioIo::new(stream), service)
                    .into_owned();
                // A client that went away or timed out is not the service's error.
                let _ = watcher.watch(connection).await;
            }
            drop((permit, slot));
        });
    }
    drop(listener);
    closing.cancel();
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            drain_seconds = DRAIN.as_secs(),
            "requests still under way at shutdown were cut"
        );
    }
    Ok(())
}

/// Answers a connection that finds no room: reads its request's head (a client that has not
/// sent it would take the answer for garbage) for at most a second; serves it when it is a
/// probe, one request and closed, else says `503`.
async fn turn_away<S>(mut stream: TcpStream, service: S)
where
    S: hyper::service::Service<
            axum::http::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
{
    use tokio::io::AsyncReadExt as _;
    let mut head = Vec::with_capacity(1024);
    let read_head = async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    };
    if tokio::time::timeout(Duration::from_secs(1), read_head).await != Ok(true) {
        return;
    }
    if is_probe(&head) {
        let (read, write) = stream.into_split();
        let io = tokio::io::join(std::io::Cursor::new(head).chain(read), write);
        let probe = hyper::server::conn::http1::Builder::new()
            .keep_alive(false)
            .serve_connection(TokioIo::new(io), service);
        let _ = tokio::time::timeout(Duration::from_secs(10), probe).await;
        return;
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&BUSY)).await;
}

/// Whether a request's head asks for a probe (`GET` or `HEAD` of [`crate::PROBES`]).
fn is_probe(head: &[u8]) -> bool {
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|b| *b == b' ');
    let (Some(method), Some(target)) = (words.next(), words.next()) else {
        return false;
    };
    let path = target.split(|b| *b == b'?').next().unwrap_or_default();
    matches!(method, b"GET" | b"HEAD") && crate::PROBES.iter().any(|p| p.as_bytes() == path)
}

/// [`turn_away`] without waiting, for the accept loop itself: a client whose request's head
/// is already in (it sent it right after connecting, as HTTP clients do) is answered `503`;
/// one that has sent nothing yet is closed.
fn turn_away_now(stream: TcpStream) {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = stream.into_std() else {
        return;
    };
    let mut head = [0u8; 16 * 1024];
    if let Ok(n) = stream.read(&mut head)
        && head[..n].windows(4).any(|w| w == b"\r\n\r\n")
    {
        let _ = stream.write_all(&BUSY);
    }
}

/// One descriptor held back for the moment `accept` fails for want of them, and whether it
/// did since the last connection taken (so that is said once, not once per connection).
struct Reserve {
    file: Option<std::fs::File>,
    short: bool,
}

impl Reserve {
    fn take() -> Self {
        Self {
            file: std::fs::File::open("/dev/null").ok(),
            short: false,
        }
    }
}

async fn on_accept_error(listener: &TcpListener, reserve: &mut Reserve, e: std::io::Error) {
    match e.raw_os_error() {
        // The peer gave up before its connection was taken: nothing to do.
        Some(nix::libc::ECONNABORTED | nix::libc::ECONNRESET | nix::libc::EPROTO) => {}
        Some(nix::libc::EMFILE | nix::libc::ENFILE) => {
            if !reserve.short {
                tracing::warn!("out of file descriptors: turning connections away");
                reserve.short = true;
            }
            reserve.file = None;
            if let Ok(Ok((stream, _))) =
                tokio::time::timeout(Duration::from_millis(10), listener.accept()).await
            {
                turn_away_now(stream);
            }
            reserve.file = std::fs::File::open("/dev/null").ok();
            // Give what holds the descriptors a moment before the next try.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        _ => {
            tracing::warn!(error = %e, "cannot accept a connection");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Raises this process's soft limit on open descriptors to its hard limit (connections, turn
/// pipes and logs all take descriptors); returns the limit now in force.
pub fn raise_descriptor_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                hard
            } else {
                soft
            }
        }
        Err(_) => 1024,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves a router whose `/slow` answers after `slow` and whose `/stuck` never answers;
    /// returns the address, the shutdown trigger and the server's task.
    async fn server(
        slow: Duration,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ) {
        let app = Router::new()
            .route(
                "/slow",
                axum::routing::get(move || async move {
                    tokio::time::sleep(slow).await;
                    "done"
                }),
            )
            .route(
                "/stuck",
                axum::routing::get(std::future::pending::<&'static str>),
            );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let limits = ConnectionLimits {
            max: 16,
            header_read_timeout: Duration::from_secs(600),
            ..ConnectionLimits::default()
        };
        let task = tokio::spawn(serve(listener, app, limits, async move {
            let _ = stopped.await;
        }));
        (addr, stop, task)
    }

    async fn send(addr: std::net::SocketAddr, path: &str) -> TcpStream {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        stream
    }

    async fn answer(mut stream: TcpStream) -> String {
        use tokio::io::AsyncReadExt as _;
        let mut text = Vec::new();
        let mut buf = [0u8; 1024];
        while !String::from_utf8_lossy(&text).contains("done") {
            match stream.read(&mut buf).await.unwrap() {
                0 => break,
                n => text.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    }

    #[tokio::test]
    async fn a_silent_connection_does_not_hold_the_shutdown_and_a_request_under_way_finishes() {
        let (addr, stop, task) = server(Duration::from_millis(500)).await;
        // Connected, never a byte: it would hold the shutdown for its 600 s header timeout.
        let _silent = TcpStream::connect(addr).await.unwrap();
        let slow = send(addr, "/slow").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.send(()).unwrap();
        let answered = tokio::spawn(answer(slow));
        tokio::time::timeout(DRAIN, task)
            .await
            .expect("the server stops within its drain time")
            .unwrap()
            .unwrap();
        let answered = answered.await.unwrap();
        assert!(
            answered.starts_with("HTTP/1.1 200") && answered.ends_with("done"),
            "{answered}"
        );
    }

    #[tokio::test]
    async fn a_request_that_never_ends_is_cut_after_the_drain_time() {
        let (addr, stop, task) = server(Duration::ZERO).await;
        let _stuck = send(addr, "/stuck").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.send(()).unwrap();
        tokio::time::timeout(DRAIN * 2, task)
            .await
            .expect("the server stops after its drain time")
            .unwrap()
            .unwrap();
    }

    #[test]
    fn the_busy_answer_is_well_formed() {
        let text = std::str::from_utf8(&super::BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{text}"
        );
        serde_json::from_str::<serde_json::Value>(body).unwrap();
    }
}
