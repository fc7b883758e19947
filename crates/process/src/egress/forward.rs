//! Forwarding a turn's HTTP requests to one upstream with its secrets put in: what a model door
//! does with the plain HTTP its engine sends, and what the proxy does inside a TLS connection it
//! terminated for a host a secret is bound to.
//!
//! Each request of the turn's connection is read, checked (inside a terminated connection its
//! `Host` must name the host the connection was opened to), given the values of the secrets
//! whose placeholders it carries in their headers, and sent on the connection's own upstream
//! connection (TLS verified against the host's name, to an address checked before); the answer
//! comes back as it is. A redirect is the turn's to follow: it opens a connection of its own,
//! which the proxy judges afresh.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use super::policy::Target;
use super::secrets::{Bound, Injected};
use super::tls::server_name;
use super::{EgressLog, Line};
use crate::redact::{Masker, Secrets};
use secrecy::ExposeSecret as _;

/// How long a turn may take to send a request head, and the upstream to accept a connection.
const STEP_LIMIT: Duration = Duration::from_secs(15);

type Body = BoxBody<Bytes, hyper::Error>;

/// Where a connection's requests go.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub target: Target,
    /// TLS to the target (else plain HTTP: an operator's loopback endpoint).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The addresses the target's name resolved to and passed the address rules, in order.
    pub addresses: Vec<IpAddr>,
    /// Whether each request's `Host` must name the target (a connection the proxy terminated;
    /// a model door's engine names the door instead).
    pub check_host: bool,
    /// `door` or `proxy`, for the egress log.
    pub via: &'static str,
    /// A model door's record of its calls: its requests are kept whole, so that one the
    /// endpoint answers `429` with a short `Retry-After` is sent again after that wait.
    pub calls: Option<Arc<super::ModelCalls>>,
}

/// The longest `Retry-After` a model door waits out itself; a longer one goes to the turn.
const LONGEST_RATE_WAIT: Duration = Duration::from_secs(60);
/// How many times a door sends one request again after a `429`.
const RATE_WAITS: u32 = 5;

/// Serves the turn's connection `io` until it closes: each request goes to `upstream` with the
/// secrets of `secrets` put in.
pub async fn serve<IO>(io: IO, upstream: Upstream, secrets: Arc<[Bound]>, log: Arc<EgressLog>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let forwarder = Arc::new(Forwarder {
        upstream,
        secrets,
        log,
        connection: Mutex::new(None),
    });
    let service = hyper::service::service_fn(move |request| {
        let forwarder = forwarder.clone();
        async move { Ok::<_, Infallible>(forwarder.forward(request).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(STEP_LIMIT)
        .preserve_header_case(true)
        .serve_connection(TokioIo::new(io), service)
        .await;
}

struct Forwarder {
    upstream: Upstream,
    secrets: Arc<[Bound]>,
    log: Arc<EgressLog>,
    /// The upstream connection of this turn connection, opened at its first request.
    connection: Mutex<Option<hyper::client::conn::http1::SendRequest<Body>>>,
}

impl Forwarder {
    async fn forward(&self, mut request: Request<Incoming>) -> Response<Body> {
        let target = &self.upstream.target;
        let mut line = Line::new(&super::Door::Proxy);
        line.via = self.upstream.via;
        line.method = Some(request.method().to_string());
        line.host = target.host.clone();
        line.port = target.port;
        if self.upstream.check_host
            && let Err(why) = same_host(request.headers(), request.uri(), target)
        {
            line.verdict = "denied";
            line.reason = Some(why.clone());
            self.log.record(&line).await;
            return answer(StatusCode::MISDIRECTED_REQUEST, &why);
        }
        strip_hop_by_hop(request.headers_mut());
        let authority = match target.port {
            443 if self.upstream.tls.is_some() => host_text(target),
            80 if self.upstream.tls.is_none() => host_text(target),
            port => format!("{}:{port}", host_text(target)),
        };
        if let Ok(value) = HeaderValue::from_str(&authority) {
            request.headers_mut().insert(header::HOST, value);
        }
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        *request.uri_mut() = path.parse().unwrap_or_default();
        // Nothing comes back in a form the masking below cannot read: no compression, no
        // piece of a body.
        for name in ["range", "if-range"] {
            request.headers_mut().remove(name);
        }
        request.headers_mut().insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        for secret in self.secrets.iter() {
            match secret.inject(request.headers_mut()).await {
                Injected::NotAsked => continue,
                Injected::Yes(_) => line.injected = Some(true),
                Injected::Missing => {
                    line.injected = Some(false);
                    line.reason = Some(format!(
                        "the secret {} no longer exists: the request went with its placeholder",
                        secret.name
                    ));
                }
            }
            line.secret = Some(secret.name.clone());
        }
        let sent = match &self.upstream.calls {
            None => self.send(request.map(|b| b.boxed()), &mut line).await,
            Some(calls) => {
                let sent = self.send_patiently(request, &mut line).await;
                calls.record(
                    sent.as_ref()
                        .map(|r| (r.status(), asked_wait(r)))
                        .map_err(Clone::clone),
                );
                sent
            }
        };
        let response = match sent {
            Ok(response) => response,
            Err(why) => {
                line.verdict = "failed";
                line.reason = Some(why.clone());
                self.log.record(&line).await;
                return answer(StatusCode::BAD_GATEWAY, &why);
            }
        };
        self.log.record(&line).await;
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        // A host that echoes what it was sent (a debugging endpoint, an error message quoting
        // the key), now or from an earlier request, gives the turn no value back.
        let masks = self.masks().await;
        if masks.is_empty() {
            return Response::from_parts(parts, body.boxed());
        }
        mask_headers(&mut parts.headers, &masks);
        Response::from_parts(parts, Masked::new(body, masks).boxed())
    }

    /// The current values of the connection's secrets, to mask in its answers.
    async fn masks(&self) -> Secrets {
        let mut values: Vec<String> = Vec::new();
        for secret in self.secrets.iter() {
            if let Some(value) = secret.source.value().await {
                values.push(value.expose_secret().to_owned());
            }
        }
        Secrets::new(values.iter().map(String::as_str))
    }

    /// Sends `request` whole, and again after each `429` whose `Retry-After` is short: the
    /// turn sees the answer that came after the waits.
    async fn send_patiently(
        &self,
        request: Request<Incoming>,
        line: &mut Line,
    ) -> Result<Response<Incoming>, String> {
        let (parts, body) = request.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| format!("reading the turn's request: {e}"))?
            .to_bytes();
        let mut waits = 0;
        loop {
            let mut again = Request::builder()
                .method(parts.method.clone())
                .uri(parts.uri.clone())
                .version(parts.version)
                .body(
                    Full::new(body.clone())
                        .map_err(|never| match never {})
                        .boxed(),
                )
                .map_err(|e| e.to_string())?;
            *again.headers_mut() = parts.headers.clone();
            let response = self.send(again, line).await?;
            let wait = match asked_wait(&response) {
                Some(wait) if wait <= LONGEST_RATE_WAIT && waits < RATE_WAITS => wait,
                _ => return Ok(response),
            };
            waits += 1;
            let mut waited = line.clone();
            waited.reason = Some(format!(
                "429 from the endpoint: sent again after its Retry-After of {} s",
                wait.as_secs_f64()
            ));
            self.log.record(&waited).await;
            // Read to its end, so the connection can carry the next try.
            let _ = response.into_body().collect().await;
            tokio::time::sleep(wait).await;
        }
    }

    /// Sends `request` on the upstream connection, opening one when there is none (or the last
    /// one closed).
    async fn send(
        &self,
        request: Request<Body>,
        line: &mut Line,
    ) -> Result<Response<Incoming>, String> {
        let mut connection = self.connection.lock().await;
        let reusable = match connection.as_mut() {
            Some(sender) => sender.ready().await.is_ok(),
            None => false,
        };
        if !reusable {
            *connection = Some(self.connect(line).await?);
        }
        let sender = connection.as_mut().expect("a connection was just opened");
        line.address = line.address.or(self.upstream.addresses.first().copied());
        sender
            .send_request(request)
            .await
            .map_err(|e| format!("{}: {e}", self.upstream.target))
    }

    async fn connect(
        &self,
        line: &mut Line,
    ) -> Result<hyper::client::conn::http1::SendRequest<Body>, String> {
        let target = &self.upstream.target;
        let mut last = String::from("no address");
        for ip in &self.upstream.addresses {
            let address = SocketAddr::new(*ip, target.port);
            let tcp = match tokio::time::timeout(STEP_LIMIT, TcpStream::connect(address)).await {
                Ok(Ok(tcp)) => tcp,
                Ok(Err(e)) => {
                    last = format!("connecting to {address}: {e}");
                    continue;
                }
                Err(_) => {
                    last = format!("connecting to {address}: no answer within 15 s");
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            line.address = Some(*ip);
            return match &self.upstream.tls {
                None => handshake(tcp).await,
                Some(config) => {
                    let name = server_name(&target.host)?;
                    let connector = tokio_rustls::TlsConnector::from(config.clone());
                    let tls = tokio::time::timeout(STEP_LIMIT, connector.connect(name, tcp))
                        .await
                        .map_err(|_| format!("TLS with {target}: no answer within 15 s"))?
                        .map_err(|e| format!("TLS with {target}: {e}"))?;
                    handshake(tls).await
                }
            };
        }
        Err(last)
    }
}

/// Masks the values of `masks` in every header, as bytes (a value need not be text).
fn mask_headers(headers: &mut HeaderMap, masks: &Secrets) {
    for value in headers.values_mut() {
        let mut bytes = value.as_bytes().to_vec();
        masks.mask(&mut bytes);
        if bytes != value.as_bytes()
            && let Ok(masked) = HeaderValue::from_bytes(&bytes)
        {
            *value = masked;
        }
    }
}

/// A response body with the values of [`Secrets`] masked as it streams, its length kept (a
/// value is replaced by as many `*`, so `Content-Length` stays true), its trailers too.
struct Masked<B> {
    inner: B,
    masker: Masker,
    masks: Secrets,
    /// Trailers, sent after the bytes the masker still held.
    trailers: Option<hyper::body::Frame<Bytes>>,
    done: bool,
}

impl<B> Masked<B> {
    fn new(inner: B, masks: Secrets) -> Self {
        Self {
            inner,
            masker: Masker::new(masks.clone()),
            masks,
            trailers: None,
            done: false,
        }
    }
}

impl<B> hyper::body::Body for Masked<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, B::Error>>> {
        use std::task::Poll;
        if let Some(trailers) = self.trailers.take() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        if self.done {
            return Poll::Ready(None);
        }
        match std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    let masked = self.masker.push(&data);
                    Poll::Ready(Some(Ok(hyper::body::Frame::data(masked.into()))))
                }
                Err(frame) => {
                    let Ok(mut trailers) = frame.into_trailers() else {
                        return Poll::Ready(None);
                    };
                    mask_headers(&mut trailers, &self.masks);
                    let trailers = hyper::body::Frame::trailers(trailers);
                    let rest = self.masker.finish();
                    if rest.is_empty() {
                        return Poll::Ready(Some(Ok(trailers)));
                    }
                    self.trailers = Some(trailers);
                    Poll::Ready(Some(Ok(hyper::body::Frame::data(rest.into()))))
                }
            },
            Poll::Ready(None) => {
                self.done = true;
                let rest = self.masker.finish();
                Poll::Ready((!rest.is_empty()).then(|| Ok(hyper::body::Frame::data(rest.into()))))
            }
            other => other,
        }
    }
}

async fn handshake<IO>(io: IO) -> Result<hyper::client::conn::http1::SendRequest<Body>, String>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// How long a `429` answer asks to wait (`retry-after-ms`, or `Retry-After` in seconds).
fn asked_wait(response: &Response<Incoming>) -> Option<Duration> {
    if response.status() != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    header("retry-after-ms")
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .or_else(|| header("retry-after").map(Duration::from_secs_f64))
}

/// Whether the request names `target`'s host (its `Host` header, or an absolute-form URI's
/// authority), with `target`'s port or none.
fn same_host(headers: &HeaderMap, uri: &hyper::Uri, target: &Target) -> Result<(), String> {
    let named = uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        })
        .ok_or("the request names no host")?;
    let matches = match Target::parse(&named) {
        Ok(t) => t.is(&target.host, target.port),
        Err(_) => Target::parse(&format!("{named}:{}", target.port))
            .is_ok_and(|t| t.is(&target.host, target.port)),
    };
    if matches {
        Ok(())
    } else {
        Err(format!(
            "the request's Host '{named}' is not {target}, the host this connection was opened to"
        ))
    }
}

/// The host as it goes into a `Host` header.
fn host_text(target: &Target) -> String {
    if target.host.contains(':') {
        format!("[{}]", target.host)
    } else {
        target.host.clone()
    }
}

/// Removes the headers meant for one hop (and those the `Connection` header names).
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    for name in named {
        headers.remove(name.as_str());
    }
    for name in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

fn answer(status: StatusCode, why: &str) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(format!("skill-runner egress: {why}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_must_be_the_connections() {
        let target = Target::parse("api.example.com:443").unwrap();
        let host = |h: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, h.parse().unwrap());
            same_host(&headers, &"/x".parse().unwrap(), &target)
        };
        assert!(host("api.example.com").is_ok());
        assert!(host("API.example.com:443").is_ok());
        assert!(host("api.example.com.").is_ok());
        assert!(host("evil.example.com").is_err());
        assert!(host("api.example.com:8443").is_err());
        assert!(same_host(&HeaderMap::new(), &"/x".parse().unwrap(), &target).is_err());
        let absolute: hyper::Uri = "https://evil.net/x".parse().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "api.example.com".parse().unwrap());
        assert!(same_host(&headers, &absolute, &target).is_err());
    }

    #[test]
    fn hop_by_hop_headers_stay_on_their_hop() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONNECTION, "keep-alive, x-private".parse().unwrap());
        headers.insert("x-private", "1".parse().unwrap());
        headers.insert("proxy-authorization", "Basic x".parse().unwrap());
        headers.insert("authorization", "Bearer y".parse().unwrap());
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1);
        assert!(headers.contains_key("authorization"));
    }
}
