//! Open connections, bounded before a byte of a request is read: how many
//! at once (`--max-connections`), how many from one peer address
//! (`--max-connections-per-source`), and how long each may hold its place
//! without sending a request.
//!
//! A sender that costs nothing to be (no signature is checked before its
//! headers are in) could otherwise stop intake for every provider by
//! opening connections and sending nothing, sending its headers a byte at
//! a time (slowloris), or keeping a connection idle after an answer. So a
//! connection is in one of four phases, each with its bound:
//!
//! - **new**: its first request's headers complete within
//!   `--header-timeout` of the connection opening;
//! - **idle** (answered, kept alive): the next request's first byte within
//!   `--idle-timeout`;
//! - **head**: from that first byte, the headers within `--header-timeout`;
//! - **busy**: a request being answered, bounded by `--total-timeout` from
//!   its first byte (the delivery's own deadlines, `delivery.rs`).
//!
//! A connection past its phase's bound is closed. A connection over a
//! bound on open connections is answered `503` with `Retry-After` and
//! closed at once, without reading it: every provider retries that; the
//! refusals are logged, a line a second at most (`source.rs`, Sampled).
//!
//! A source is a peer address cut to its prefix (an IPv6 /64: one host
//! holds all of it). Only a delivery renews a connection's idle time: a
//! health check, a scrape or a path that is no route answered on it
//! leaves the idle clock running from the last delivery's answer (or the
//! connection's opening), so that a connection polling `/healthz` is
//! closed like any idle one. And no connection lives for ever: past
//! `--max-connection-age` or `--max-connection-requests` its next answer
//! says `Connection: close`.

use crate::source::{Prefixes, Sampled};
use axum::extract::ConnectInfo;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
// Tokio's clock, which its tests can pause and move on.
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tower_service::Service;

/// The bounds, from the settings.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub max: usize,
    pub per_source: usize,
    pub prefixes: Prefixes,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub total_timeout: Duration,
    pub max_age: Duration,
    pub max_requests: usize,
}

/// Why a connection was closed or refused by the ingress; the label of
/// `webhook_ingress_connections_closed_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// `--max-connections` open already.
    MaxConnections,
    /// `--max-connections-per-source` open from its address already.
    SourceShare,
    /// A request's headers not complete within `--header-timeout`.
    HeaderTimeout,
    /// No new delivery within `--idle-timeout` of the last one's answer.
    IdleTimeout,
    /// Open longer than `--max-connection-age`: closed after an answer.
    MaxAge,
    /// `--max-connection-requests` answered: closed after the last.
    MaxRequests,
}

impl Closed {
    pub fn label(self) -> &'static str {
        match self {
            Closed::MaxConnections => "max_connections",
            Closed::SourceShare => "source_share",
            Closed::HeaderTimeout => "header_timeout",
            Closed::IdleTimeout => "idle_timeout",
            Closed::MaxAge => "max_age",
            Closed::MaxRequests => "max_requests",
        }
    }
}

/// The connections open, in all and per peer address.
#[derive(Default)]
pub struct Open {
    count: AtomicUsize,
    by_source: Mutex<HashMap<IpAddr, usize>>,
    all_closed: Notify,
}

/// A connection's place among those open; given back when dropped.
pub struct Place {
    open: Arc<Open>,
    source: IpAddr,
}

impl Open {
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// A place for a connection from `peer`, unless a bound is reached:
    /// the peer's share is its source's (its prefix's).
    pub fn admit(self: &Arc<Self>, peer: IpAddr, bounds: &Bounds) -> Result<Place, Closed> {
        let source = bounds.prefixes.source(peer);
        let mut by_source = self.by_source.lock().expect("the connections' lock");
        if self.count.load(Ordering::Relaxed) >= bounds.max {
            return Err(Closed::MaxConnections);
        }
        let mine = by_source.entry(source).or_default();
        if *mine >= bounds.per_source {
            return Err(Closed::SourceShare);
        }
        *mine += 1;
        self.count.fetch_add(1, Ordering::Relaxed);
        Ok(Place {
            open: Arc::clone(self),
            source,
        })
    }

    /// Wait until every connection is closed.
    pub async fn drained(&self) {
        loop {
            let closed = self.all_closed.notified();
            if self.count() == 0 {
                return;
            }
            closed.await;
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut by_source = self.open.by_source.lock().expect("the connections' lock");
        if let Some(mine) = by_source.get_mut(&self.source) {
            *mine -= 1;
            if *mine == 0 {
                by_source.remove(&self.source);
            }
        }
        if self.open.count.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.open.all_closed.notify_waiters();
        }
    }
}

/// When the request being answered sent its first byte (for a
/// connection's first request: when it opened). A request extension, so
/// that the delivery bounds its whole time from there.
#[derive(Clone, Copy, Debug)]
pub struct RequestStarted(pub std::time::Instant);

#[derive(Clone, Copy, Debug)]
enum Phase {
    New { since: Instant },
    Idle { since: Instant },
    Head { since: Instant },
    Busy,
}

/// A connection's phase, moved on by its reads and its requests, and
/// watched by its watchdog.
struct Activity {
    phase: Mutex<Phase>,
    /// Since when the connection has been idle as far as its idle bound
    /// goes: its opening, then each delivery's answer.
    idle_since: Mutex<Instant>,
    opened: Instant,
    answered: AtomicUsize,
    changed: Notify,
}

impl Activity {
    fn new() -> Self {
        let now = Instant::now();
        Activity {
            phase: Mutex::new(Phase::New { since: now }),
            idle_since: Mutex::new(now),
            opened: now,
            answered: AtomicUsize::new(0),
            changed: Notify::new(),
        }
    }

    /// Bytes arrived: an idle connection's next request has begun.
    fn read(&self) {
        let mut phase = self.phase.lock().expect("the phase's lock");
        if let Phase::Idle { .. } = *phase {
            *phase = Phase::Head {
                since: Instant::now(),
            };
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// A request's headers are in: it is being answered. Returns when its
    /// first byte came.
    fn begin(&self) -> Instant {
        let mut phase = self.phase.lock().expect("the phase's lock");
        let started = match *phase {
            Phase::New { since } | Phase::Head { since } => since,
            // Sent before the last answer was out (pipelined).
            Phase::Idle { .. } | Phase::Busy => Instant::now(),
        };
        *phase = Phase::Busy;
        started
    }

    /// A request was answered; `delivery`: it was one (it renews the idle
    /// time). Returns why the connection is to close after this answer.
    fn answered(&self, delivery: bool, bounds: &Bounds) -> Option<Closed> {
        let now = Instant::now();
        let since = {
            let mut idle_since = self.idle_since.lock().expect("the idle clock's lock");
            if delivery {
                *idle_since = now;
            }
            *idle_since
        };
        // Past its idle bound already (a slow answer that renewed
        // nothing): closed once this answer is out, not cut in the middle.
        let expired = now >= since + bounds.idle_timeout;
        *self.phase.lock().expect("the phase's lock") = Phase::Idle {
            since: if expired { now } else { since },
        };
        self.changed.notify_one();
        let answered = self.answered.fetch_add(1, Ordering::Relaxed) + 1;
        if expired {
            Some(Closed::IdleTimeout)
        } else if answered >= bounds.max_requests {
            Some(Closed::MaxRequests)
        } else if now.duration_since(self.opened) >= bounds.max_age {
            Some(Closed::MaxAge)
        } else {
            None
        }
    }

    /// Resolves when the connection has outstayed its phase.
    async fn outstayed(&self, bounds: &Bounds) -> Closed {
        loop {
            let changed = self.changed.notified();
            let due = match *self.phase.lock().expect("the phase's lock") {
                Phase::New { since } | Phase::Head { since } => {
                    Some((since + bounds.header_timeout, Closed::HeaderTimeout))
                }
                Phase::Idle { since } => Some((since + bounds.idle_timeout, Closed::IdleTimeout)),
                Phase::Busy => None,
            };
            match due {
                Some((at, why)) if at <= Instant::now() => return why,
                Some((at, _)) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

/// The socket, telling its connection's activity when bytes arrive.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// What a connection refused at the door is told: the whole answer, sent
/// without reading the request (a sender retries it as any 503).
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\
Content-Type: application/json\r\nContent-Length: 58\r\nConnection: close\r\n\r\n\
{\"status\":\"unavailable\",\"reason\":\"too many connections\"}\n";

/// Answer a connection refused at the door and close it. The answer fits
/// any socket's send buffer, so writing it never waits; what the sender
/// sent meanwhile is read for a moment and dropped, since closing a
/// socket with unread bytes resets it and the sender would lose the
/// answer. Bounded in time and bytes, so that refusing costs little
/// however many are refused.
async fn refuse(mut stream: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.try_write(REFUSED);
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(200), async {
        let mut left: usize = 64 * 1024;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// Accept connections until `stop` turns true, serving each with
/// `router` within `bounds`; then finish the connections open (idle ones
/// are closed at once, requests in flight answered) and return once all
/// are closed. `closed` is told of every connection the ingress closes or
/// refuses.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    bounds: Bounds,
    open: Arc<Open>,
    closed: impl Fn(Closed) + Clone + Send + Sync + 'static,
    mut stop: watch::Receiver<bool>,
) {
    let refusals = Arc::new(Sampled::default());
    let mut http = http1::Builder::new();
    // The phases above bound the headers; hyper's own timer would count
    // an idle connection's wait as header time.
    http.header_read_timeout(None).keep_alive(true);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors, say: the connections open
                // finish, then accepting resumes.
                crate::log::event(
                    "warn",
                    "accept_failed",
                    serde_json::json!({ "error": err.to_string() }),
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let place = match open.admit(peer.ip(), &bounds) {
            Ok(place) => place,
            Err(why) => {
                closed(why);
                refusals.log(|unlogged| {
                    crate::log::event(
                        "warn",
                        "connection_refused",
                        serde_json::json!({
                            "reason": why.label(),
                            "source": bounds.prefixes.source(peer.ip()).to_string(),
                            "open": open.count(),
                            "refused_unlogged": unlogged,
                        }),
                    )
                });
                tokio::spawn(refuse(stream));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched {
            stream,
            activity: Arc::clone(&activity),
        });
        let service = {
            let activity = Arc::clone(&activity);
            let router = router.clone();
            let closed = closed.clone();
            hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
                let started = activity.begin();
                let post = request.method() == hyper::Method::POST;
                request.extensions_mut().insert(ConnectInfo(peer));
                request
                    .extensions_mut()
                    .insert(RequestStarted(started.into_std()));
                let activity = Arc::clone(&activity);
                let mut router = router.clone();
                let closed = closed.clone();
                async move {
                    let mut response = router.call(request).await;
                    // A delivery: a POST that reached a provider's route.
                    let status = response.as_ref().map_or(404, |r| r.status().as_u16());
                    let delivery = post && !matches!(status, 404 | 405);
                    if let Some(why) = activity.answered(delivery, &bounds) {
                        if let Ok(response) = response.as_mut() {
                            response.headers_mut().insert(
                                hyper::header::CONNECTION,
                                hyper::header::HeaderValue::from_static("close"),
                            );
                        }
                        closed(why);
                    }
                    response
                }
            })
        };
        let connection = http.serve_connection(io, service);
        let closed = closed.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let _place = place;
            tokio::pin!(connection);
            let mut stopping = false;
            loop {
                tokio::select! {
                    _ = connection.as_mut() => break,
                    why = activity.outstayed(&bounds) => {
                        // Dropping the connection closes the socket; no
                        // request of it is being answered.
                        closed(why);
                        break;
                    }
                    _ = stop.wait_for(|stop| *stop), if !stopping => {
                        stopping = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
        });
    }
    drop(listener);
    open.drained().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(max: usize, per_source: usize) -> Bounds {
        Bounds {
            max,
            per_source,
            prefixes: Prefixes::default(),
            header_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            total_timeout: Duration::from_secs(1),
            max_age: Duration::from_secs(3600),
            max_requests: 1000,
        }
    }

    #[test]
    fn a_source_holds_its_share_and_all_hold_at_most_the_bound() {
        let open = Arc::new(Open::default());
        let b = bounds(5, 2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let c: IpAddr = "192.0.2.2".parse().unwrap();
        let d: IpAddr = "192.0.2.3".parse().unwrap();
        let first = open.admit(a, &b).unwrap();
        let _second = open.admit(a, &b).unwrap();
        assert_eq!(open.admit(a, &b).err(), Some(Closed::SourceShare));
        let _others: Vec<Place> = (0..2).map(|_| open.admit(c, &b).unwrap()).collect();
        let _fifth = open.admit(d, &b).unwrap();
        assert_eq!(open.count(), 5);
        assert_eq!(open.admit(d, &b).err(), Some(Closed::MaxConnections));
        drop(first);
        assert_eq!(open.count(), 4);
        assert!(
            open.admit(a, &b).is_ok(),
            "a place given back is taken again"
        );
        assert_eq!(
            open.by_source.lock().unwrap().len(),
            3,
            "only sources with connections open are kept"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn each_phase_is_bounded_by_its_own_timeout() {
        let b = Bounds {
            header_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(5),
            ..bounds(1, 1)
        };
        let activity = Activity::new();
        let opened = Instant::now();
        assert_eq!(activity.outstayed(&b).await, Closed::HeaderTimeout);
        assert!(opened.elapsed() >= Duration::from_secs(2));

        let activity = Activity::new();
        activity.begin();
        let busy = tokio::time::timeout(Duration::from_secs(60), activity.outstayed(&b)).await;
        assert!(busy.is_err(), "a request being answered is not closed");
        assert_eq!(activity.answered(true, &b), None);
        let answered = Instant::now();
        assert_eq!(activity.outstayed(&b).await, Closed::IdleTimeout);
        assert!(answered.elapsed() >= Duration::from_secs(5));

        activity.answered(true, &b);
        tokio::time::sleep(Duration::from_secs(4)).await;
        activity.read();
        let byte = Instant::now();
        assert_eq!(activity.outstayed(&b).await, Closed::HeaderTimeout);
        assert!(byte.elapsed() >= Duration::from_secs(2));
        assert!(byte.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn an_ipv6_host_has_one_share_for_its_64() {
        let open = Arc::new(Open::default());
        let b = bounds(100, 2);
        let _one = open.admit("2001:db8:1:2::1".parse().unwrap(), &b).unwrap();
        let _two = open.admit("2001:db8:1:2::2".parse().unwrap(), &b).unwrap();
        assert_eq!(
            open.admit("2001:db8:1:2:ffff::9".parse().unwrap(), &b)
                .err(),
            Some(Closed::SourceShare),
            "a third address of the same /64"
        );
        assert!(open.admit("2001:db8:1:3::1".parse().unwrap(), &b).is_ok());
        let wide = Bounds {
            prefixes: Prefixes { v4: 24, v6: 64 },
            ..bounds(100, 1)
        };
        let _a = open.admit("198.51.100.1".parse().unwrap(), &wide).unwrap();
        assert_eq!(
            open.admit("198.51.100.200".parse().unwrap(), &wide).err(),
            Some(Closed::SourceShare),
            "an IPv4 prefix the DBA chose"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_delivery_renews_the_idle_time() {
        let b = Bounds {
            idle_timeout: Duration::from_secs(30),
            ..bounds(1, 1)
        };
        let activity = Activity::new();
        activity.begin();
        activity.answered(true, &b);
        let delivered = Instant::now();
        // A health check every 25 s: the connection is still closed 30 s
        // after the delivery's answer.
        let polling = async {
            loop {
                tokio::time::sleep(Duration::from_secs(25)).await;
                activity.read();
                activity.begin();
                activity.answered(false, &b);
            }
        };
        let why = tokio::select! {
            why = activity.outstayed(&b) => why,
            _ = polling => unreachable!(),
        };
        assert_eq!(why, Closed::IdleTimeout);
        assert!(delivered.elapsed() >= Duration::from_secs(30));
        assert!(
            delivered.elapsed() < Duration::from_secs(50),
            "{:?}",
            delivered.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_connection_lives_for_ever() {
        let b = Bounds {
            max_requests: 3,
            max_age: Duration::from_secs(60),
            ..bounds(1, 1)
        };
        let activity = Activity::new();
        assert_eq!(activity.answered(true, &b), None);
        assert_eq!(activity.answered(true, &b), None);
        assert_eq!(activity.answered(true, &b), Some(Closed::MaxRequests));
        let activity = Activity::new();
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert_eq!(activity.answered(true, &b), None);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(activity.answered(true, &b), Some(Closed::MaxAge));
    }
}
