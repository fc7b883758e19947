//! A request body that must keep coming: at least a minimum rate on average once a grace
//! period has passed, and done within an overall deadline. A client that trickles a body (one
//! byte every few seconds under an announced 10 MB) would otherwise hold its connection, and
//! the handler reading it, as long as it liked; past either bound the body ends in an error
//! that names the bound and the setting that raises it, and the connection is closed.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// How fast and how long a request body may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    /// Bytes per second on average, from the body's start, once `grace` has passed
    /// (`SKILL_RUNNER_BODY_MIN_BYTES_PER_SECOND`).
    pub min_rate: u64,
    /// Time before the rate counts: a client's first bytes may be slow to come.
    pub grace: Duration,
    /// The whole body's deadline (`SKILL_RUNNER_BODY_TIMEOUT_SECONDS`).
    pub timeout: Duration,
}

impl Default for BodyLimits {
    fn default() -> Self {
        Self {
            min_rate: 1024,
            grace: Duration::from_secs(10),
            timeout: Duration::from_secs(600),
        }
    }
}

/// Why a body was cut short.
#[derive(Debug)]
pub struct TooSlow(String);

impl std::fmt::Display for TooSlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TooSlow {}

/// `inner` under `limits`.
#[derive(Debug)]
pub struct Deadline<B> {
    inner: B,
    limits: BodyLimits,
    started: Instant,
    received: u64,
    /// Fires when the body would be too slow or too late with what it has received so far.
    check: Pin<Box<Sleep>>,
    ended: bool,
}

impl<B> Deadline<B> {
    pub fn new(inner: B, limits: BodyLimits) -> Self {
        let started = Instant::now();
        let mut body = Self {
            inner,
            limits,
            started,
            received: 0,
            check: Box::pin(tokio::time::sleep_until(started)),
            ended: false,
        };
        let due = body.due();
        body.check.as_mut().reset(due);
        body
    }

    /// When the body fails unless more comes: its average rate falls below the minimum once
    /// the grace has passed, or its deadline.
    fn due(&self) -> Instant {
        let rate = self.limits.min_rate.max(1);
        let paid_for = Duration::from_secs_f64(self.received as f64 / rate as f64);
        self.started + paid_for.max(self.limits.grace).min(self.limits.timeout)
    }

    fn failure(&self) -> TooSlow {
        let elapsed = self.started.elapsed();
        TooSlow(if elapsed >= self.limits.timeout {
            format!(
                "the request body took longer than {} s (SKILL_RUNNER_BODY_TIMEOUT_SECONDS)",
                self.limits.timeout.as_secs()
            )
        } else {
            format!(
                "the request body came slower than {} bytes/s ({} bytes in {:.0} s; \
                 SKILL_RUNNER_BODY_MIN_BYTES_PER_SECOND)",
                self.limits.min_rate,
                self.received,
                elapsed.as_secs_f64()
            )
        })
    }
}

impl<B> Body for Deadline<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.received += data.len() as u64;
                    let due = self.due();
                    self.check.as_mut().reset(due);
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => {
                self.ended = true;
                return Poll::Ready(None);
            }
            Poll::Pending => {}
        }
        match self.check.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.ended = true;
                Poll::Ready(Some(Err(Box::new(self.failure()))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    /// A body that sends one byte, then nothing.
    fn trickle() -> http_body_util::StreamBody<
        futures_util::stream::BoxStream<'static, Result<Frame<Bytes>, std::convert::Infallible>>,
    > {
        use futures_util::StreamExt as _;
        let stream =
            futures_util::stream::once(async { Ok(Frame::data(Bytes::from_static(b"x"))) })
                .chain(futures_util::stream::pending());
        http_body_util::StreamBody::new(stream.boxed())
    }

    #[tokio::test]
    async fn a_trickling_body_is_cut_after_the_grace_and_a_quick_one_is_whole() {
        let limits = BodyLimits {
            min_rate: 1000,
            grace: Duration::from_millis(300),
            timeout: Duration::from_secs(60),
        };
        let started = Instant::now();
        let cut = Deadline::new(trickle(), limits)
            .collect()
            .await
            .unwrap_err();
        assert!(
            cut.to_string().contains("slower than 1000 bytes/s"),
            "{cut}"
        );
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(5));
        let whole = Deadline::new(
            http_body_util::Full::new(Bytes::from_static(b"abc")),
            limits,
        )
        .collect()
        .await
        .unwrap()
        .to_bytes();
        assert_eq!(&whole[..], b"abc");
    }
}
