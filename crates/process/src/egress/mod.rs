//! A turn's network: nothing, or doors to an allow-list through the service's audited proxy.
//!
//! A confined turn runs in a network namespace of its own that holds only its loopback: no
//! route anywhere, not to the service's API, not to another run, not to the machine's other
//! ports. A turn with an allow-list (an agent turn's model endpoint, the `host:port`s a skill
//! declares in `runner.json` `network.allow` that `SKILL_RUNNER_EGRESS_ALLOW` permits) gets
//! doors: listeners the turn leader opens inside the namespace and hands to the service, which
//! serves them from its own network ([`proxy`]):
//! - the proxy, `127.0.0.1:3128` in the turn (`HTTP_PROXY`/`HTTPS_PROXY`): `CONNECT host:port`
//!   and absolute-form `http://` requests to any allowed target;
//! - a bridge per allowed loopback target (`http://127.0.0.1:<port>` endpoints): the same
//!   address and port inside the turn, forwarded as they are, for clients that ignore proxy
//!   variables or bypass them for loopback.
//!
//! - a model door, `127.0.0.1:3127` in the turn, for an engine whose key the service holds: its
//!   CLI's base URL points there, plain HTTP, and the door forwards each request to the real
//!   endpoint with the key put in place of its placeholder ([`forward`], [`secrets`]).
//!
//! The proxy terminates TLS for a host a secret of the turn is bound to, with a certificate of
//! the service's own CA ([`tls`]), and forwards each request as a model door does; to any other
//! host a `CONNECT` stays a tunnel it cannot read.
//!
//! Every connection (and every request the egress forwards itself) is one line of the run's
//! `logs/egress.jsonl`; a refused one also adds a `[skill-runner]` line to the turn's stderr, so
//! it shows in the run's events and failure.

pub mod forward;
pub mod policy;
pub mod proxy;
pub mod secrets;
pub mod tls;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use hyper::StatusCode;
use tokio::io::AsyncWriteExt as _;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use policy::{HostPattern, Refusal, Target};

use crate::OnOutput;

/// Where the proxy listens inside a turn, unless a bridge needs that port.
const PROXY_PORT: u16 = 3128;

/// Where a turn's model door listens, inside its own network namespace.
pub const MODEL_DOOR: SocketAddr = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 3127);

/// What a listener of the turn does with a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Door {
    /// Reads a proxy request and goes where it asks, if allowed.
    Proxy,
    /// Goes to its one target.
    Bridge(Target),
    /// Forwards HTTP requests to an engine's endpoint with its key.
    Model(ModelDoor),
}

/// An engine's endpoint behind a model door: where its requests go and the key they get.
#[derive(Debug, Clone)]
pub struct ModelDoor {
    /// Allowed exactly: an operator's endpoint may be on this machine or a private network.
    pub upstream: Target,
    /// Whether the endpoint is `https://` (else the operator configured plain HTTP).
    pub tls: bool,
    pub key: secrets::Bound,
    /// What the turn's model calls came to.
    pub calls: Arc<ModelCalls>,
}

/// What a turn's model calls through its door came to: after a failed turn the service tells
/// a model endpoint's failure (which may pass on a later try) from the turn's own.
#[derive(Debug, Default)]
pub struct ModelCalls {
    state: std::sync::Mutex<CallState>,
}

#[derive(Debug, Default, Clone)]
struct CallState {
    answered: u32,
    failure: Option<ModelFailure>,
    /// The wait the latest failure asked for (a `429`'s `Retry-After`).
    retry_after: Option<std::time::Duration>,
}

/// How the endpoint failed the latest model call, when it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFailure {
    /// It answered a 5xx or 429 status.
    Status(u16),
    /// It could not be reached, or the connection broke.
    Unreachable(String),
}

impl std::fmt::Display for ModelFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Status(status) => write!(f, "it answered HTTP {status}"),
            Self::Unreachable(why) => write!(f, "it could not be reached: {why}"),
        }
    }
}

impl ModelCalls {
    /// Model calls the endpoint answered with success.
    pub fn answered(&self) -> u32 {
        self.lock().answered
    }

    /// How the latest call failed, if the endpoint failed it (a later success clears it).
    pub fn failure(&self) -> Option<ModelFailure> {
        self.lock().failure.clone()
    }

    /// The wait the endpoint asked for with its latest failure (a `429` too long for the door
    /// to wait out itself): a retry waits at least that long.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.lock().retry_after
    }

    /// Keeps what a call came to: the endpoint's status and the wait it asked for, or why
    /// there was no answer.
    fn record(&self, outcome: Result<(StatusCode, Option<std::time::Duration>), String>) {
        let mut state = self.lock();
        state.retry_after = None;
        match outcome {
            Ok((status, _)) if status.is_success() => {
                state.answered += 1;
                state.failure = None;
            }
            Ok((status, asked))
                if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS =>
            {
                state.failure = Some(ModelFailure::Status(status.as_u16()));
                state.retry_after = asked;
            }
            // The turn's own mistake (a 4xx): not the endpoint's failure.
            Ok(_) => state.failure = None,
            Err(why) => state.failure = Some(ModelFailure::Unreachable(why)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CallState> {
        self.state.lock().expect("model calls lock")
    }
}

impl PartialEq for ModelDoor {
    fn eq(&self, other: &Self) -> bool {
        (&self.upstream, self.tls, &self.key.placeholder)
            == (&other.upstream, other.tls, &other.key.placeholder)
    }
}

impl Eq for ModelDoor {}

/// The doors of a turn with an allow-list: where each listens inside the turn, and the
/// variables that point the turn's programs at the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doors {
    pub listen: Vec<(SocketAddr, Door)>,
    pub env: Vec<(String, String)>,
}

impl Doors {
    /// The doors to `allow` and the model door: none for neither (no network at all).
    pub fn plan(allow: &[Target], model: Option<&ModelDoor>) -> Option<Self> {
        if allow.is_empty() && model.is_none() {
            return None;
        }
        let mut listen: Vec<(SocketAddr, Door)> = Vec::new();
        if let Some(model) = model {
            listen.push((MODEL_DOOR, Door::Model(model.clone())));
        }
        for target in allow.iter().filter(|t| t.is_loopback() && t.internal_ok) {
            let ip = target
                .literal()
                .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
            let address = SocketAddr::new(ip, target.port);
            if !listen.iter().any(|(a, _)| *a == address) {
                listen.push((address, Door::Bridge(target.clone())));
            }
        }
        let port = (PROXY_PORT..)
            .find(|p| !listen.iter().any(|(a, _)| a.port() == *p))
            .expect("a free port above 3128");
        let proxy = SocketAddr::from(([127, 0, 0, 1], port));
        listen.push((proxy, Door::Proxy));
        let mut env = proxy_env(proxy);
        if model.is_some() {
            // The door is in the turn's network, where the proxy cannot go; on loopback there
            // the turn finds only its doors and bridges anyway.
            for (name, value) in env.iter_mut() {
                if name.eq_ignore_ascii_case("no_proxy") {
                    *value = MODEL_DOOR.ip().to_string();
                }
            }
        }
        Some(Self { listen, env })
    }

    /// The one door of a turn that shares the service's network: the proxy, listening at
    /// `proxy` in the service's network (no bridges: a turn there reaches no port but this one).
    pub fn proxy_at(proxy: SocketAddr) -> Self {
        Self {
            listen: vec![(proxy, Door::Proxy)],
            env: proxy_env(proxy),
        }
    }
}

/// The variables that point a turn's programs at the proxy at `proxy`.
fn proxy_env(proxy: SocketAddr) -> Vec<(String, String)> {
    let url = format!("http://{proxy}");
    ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
        .into_iter()
        .map(|k| (k.to_owned(), url.clone()))
        // Nothing bypasses the proxy (a client that goes straight to loopback finds only the
        // bridges there).
        .chain(["NO_PROXY", "no_proxy"].map(|k| (k.to_owned(), String::new())))
        .collect()
}

/// One line of `logs/egress.jsonl`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Line {
    pub time: String,
    /// `proxy` or `bridge`.
    pub via: &'static str,
    /// The proxy request's method (`CONNECT`, `GET`…); none for a bridge.
    pub method: Option<String>,
    pub host: String,
    pub port: u16,
    /// The address connected to.
    pub address: Option<IpAddr>,
    /// Bytes from the turn to the host, and back.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// `allowed`, `denied` or `failed` (allowed, but the host could not be reached).
    pub verdict: &'static str,
    pub reason: Option<String>,
    /// The secret whose placeholder a forwarded request carried (never its value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Whether its value went in (false: the secret no longer exists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub injected: Option<bool>,
}

impl Line {
    fn new(door: &Door) -> Self {
        let (via, host, port) = match door {
            Door::Proxy => ("proxy", String::new(), 0),
            Door::Bridge(t) => ("bridge", t.host.clone(), t.port),
            Door::Model(m) => ("door", m.upstream.host.clone(), m.upstream.port),
        };
        Self {
            time: skill_runner_types::clock::Timestamp::now().to_string(),
            via,
            method: None,
            host,
            port,
            address: None,
            bytes_sent: 0,
            bytes_received: 0,
            verdict: "allowed",
            reason: None,
            secret: None,
            injected: None,
        }
    }
}

/// Where a turn's connections are written down.
#[derive(Debug)]
pub struct EgressLog {
    /// `logs/egress.jsonl`.
    pub lines: PathBuf,
    /// The turn's stderr log, which carries a notice of each refusal.
    pub notices: PathBuf,
    pub on_output: Option<OnOutput>,
}

impl EgressLog {
    async fn record(&self, line: &Line) {
        metrics::counter!("skill_runner_egress_connections_total", "verdict" => line.verdict)
            .increment(1);
        let mut text = serde_json::to_string(line).expect("a line serializes");
        text.push('\n');
        if let Err(e) = append(&self.lines, text.as_bytes()).await {
            tracing::warn!(error = %e, path = %self.lines.display(), "cannot write the egress log");
        }
    }

    async fn denied(&self, mut line: Line, refusal: &Refusal) {
        line.verdict = "denied";
        line.reason = Some(refusal.to_string());
        self.record(&line).await;
        let target = match line.host.as_str() {
            "" => "a request".to_owned(),
            host => Target {
                host: host.to_owned(),
                port: line.port,
                internal_ok: false,
            }
            .to_string(),
        };
        let notice = format!("[skill-runner] egress denied: {target} {refusal}\n");
        if append(&self.notices, notice.as_bytes()).await.is_ok()
            && let Some(hook) = &self.on_output
        {
            (hook.0)();
        }
    }
}

async fn append(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .await?;
    file.write_all(bytes).await
}

/// What a turn's doors serve: where it may go, the secrets it may have put in, and how.
#[derive(Debug)]
pub struct Egress {
    pub allow: Vec<Target>,
    /// The skill's secrets, put in on requests to their hosts by the proxy.
    pub bound: Vec<secrets::Bound>,
    /// The service's TLS; without it no connection is terminated and no secret is put in.
    pub tls: Option<Arc<tls::Tls>>,
    pub log: Arc<EgressLog>,
}

/// The served doors of a running turn.
#[derive(Debug)]
pub struct Served {
    cancel: CancellationToken,
    tasks: JoinSet<()>,
}

impl Served {
    /// Serves each listener (in the order of `doors.listen`) for the turn.
    pub fn start(
        listeners: Vec<std::net::TcpListener>,
        doors: &Doors,
        egress: Egress,
    ) -> std::io::Result<Self> {
        let cancel = CancellationToken::new();
        let egress = Arc::new(egress);
        let mut tasks = JoinSet::new();
        for (listener, (_, door)) in listeners.into_iter().zip(&doors.listen) {
            listener.set_nonblocking(true)?;
            let listener = tokio::net::TcpListener::from_std(listener)?;
            tasks.spawn(proxy::serve(
                listener,
                door.clone(),
                egress.clone(),
                cancel.clone(),
            ));
        }
        Ok(Self { cancel, tasks })
    }

    /// Stops serving (the turn is over) once every connection has logged its line.
    pub async fn close(mut self) {
        self.cancel.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doors_bridge_exact_loopback_targets_and_proxy_the_rest() {
        assert_eq!(Doors::plan(&[], None), None, "no allow-list, no network");
        let fake = Target::parse("127.0.0.1:3128").unwrap().exact();
        let github = Target::parse("api.github.com:443").unwrap();
        let wildcarded = Target::parse("127.0.0.1:9000").unwrap();
        let doors = Doors::plan(&[fake.clone(), github, wildcarded], None).unwrap();
        assert_eq!(
            doors.listen,
            vec![
                ("127.0.0.1:3128".parse().unwrap(), Door::Bridge(fake)),
                ("127.0.0.1:3129".parse().unwrap(), Door::Proxy),
            ],
            "a loopback target not allowed exactly gets no bridge"
        );
        assert!(
            doors
                .env
                .contains(&("HTTPS_PROXY".to_owned(), "http://127.0.0.1:3129".to_owned()))
        );
    }
}
