//! The HTTP server loop shared by the daemon and the remediation receiver, with every
//! resource a client can hold bounded.
//!
//! `axum::serve` accepts cleartext HTTP/2 (h2c) whenever hyper's `http2` feature is on in
//! the build (another dependency turns it on), keeps a connection as long as the client
//! likes, and sleeps a second on every accept error, so 20 connections × 200 stalled
//! streams grew the daemon by a quarter of a gigabyte and 20,000 idle connections stopped
//! `/metrics`. This loop instead:
//!
//! - speaks HTTP/1.1 only, unless the web config turns on HTTP/2 with TLS (ALPN `h2`,
//!   never cleartext), and then with a small stream and header budget;
//! - gives a client [`Limits::header_read_timeout`] to send each request head (hyper's
//!   timer starts whenever the connection waits for a head, so it also ends idle
//!   keep-alive connections and slowloris heads) and closes a connection that moves no
//!   byte for [`Limits::idle_timeout`] (a client that stopped reading its response);
//! - caps request heads at [`Limits::max_header_bytes`] and 100 headers;
//! - holds at most [`Limits::max_connections`]: at the cap the connection that has been
//!   idle longest (no request in flight) is closed to make room, so a flood of idle
//!   connections cannot lock out a scraper; when every connection is busy the new one is
//!   closed at once;
//! - raises the process's open-file limit to fit the cap, and backs off 50 ms (not 1 s)
//!   on accept errors such as `EMFILE`;
//! - applies the web config: TLS (see [`tls`]), basic auth, rate limit and extra headers
//!   (see [`auth`]);
//! - on shutdown stops accepting, asks every connection to finish its response, and drops
//!   what is left after [`Limits::shutdown_grace`].

pub(crate) mod auth;
pub(crate) mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tower::ServiceExt as _;

pub use auth::{Security, WebError};

/// Resource limits of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most.
    pub max_connections: usize,
    /// Time to send a request head (also bounds idle keep-alive).
    pub header_read_timeout: Duration,
    /// No byte either way for this long closes the connection.
    pub idle_timeout: Duration,
    /// Largest request head.
    pub max_header_bytes: usize,
    /// How long shutdown waits for responses in flight.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_header_bytes: 16 << 10,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

impl Limits {
    /// The daemon's limits from `[web]`.
    pub fn from_config(w: &crate::config::WebConfig) -> Self {
        Self {
            max_connections: w.max_connections as usize,
            header_read_timeout: w.header_read_timeout,
            idle_timeout: w.idle_timeout,
            max_header_bytes: w.max_header_bytes as usize,
            ..Self::default()
        }
    }
}

/// Largest number of request headers.
const MAX_HEADERS: usize = 100;
/// HTTP/2 streams a connection may have open at once.
const H2_MAX_STREAMS: u32 = 16;
/// Back-off after a failed `accept(2)` (`EMFILE`, `ENFILE`, `ENOBUFS`…).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Milliseconds since the server started: a clock that fits an atomic.
#[derive(Debug, Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn now_ms(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }
}

/// What the server knows of one connection.
#[derive(Debug)]
struct ConnState {
    /// Last time a byte moved, on the server's [`Clock`].
    last_activity: AtomicU64,
    /// Requests whose response body has not been sent yet.
    in_flight: AtomicU32,
    /// Closes the connection at once (eviction).
    evict: Notify,
    /// Chosen for eviction and on its way out: no longer counts against the cap.
    evicting: std::sync::atomic::AtomicBool,
}

/// Every open connection, for the cap and eviction.
#[derive(Debug, Default)]
struct Registry {
    conns: Mutex<std::collections::HashMap<u64, Arc<ConnState>>>,
}

impl Registry {
    fn len(&self) -> usize {
        self.conns.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Makes room for one more connection if the cap is reached: evicts the connection
    /// idle longest. `false` if every connection is serving a request.
    fn make_room(&self, cap: usize) -> bool {
        let conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        let live = conns
            .values()
            .filter(|c| !c.evicting.load(Ordering::Relaxed))
            .count();
        if live < cap {
            return true;
        }
        let victim = conns
            .values()
            .filter(|c| {
                c.in_flight.load(Ordering::Relaxed) == 0 && !c.evicting.load(Ordering::Relaxed)
            })
            .min_by_key(|c| c.last_activity.load(Ordering::Relaxed));
        match victim {
            Some(v) => {
                v.evicting.store(true, Ordering::Relaxed);
                v.evict.notify_one();
                true
            }
            None => false,
        }
    }

    fn insert(&self, id: u64, c: Arc<ConnState>) {
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, c);
    }

    fn remove(&self, id: u64) {
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
}

/// An I/O stream that records when bytes last moved.
struct Tracked<T> {
    inner: T,
    state: Arc<ConnState>,
    clock: Clock,
}

impl<T> Tracked<T> {
    fn touch(&self) {
        self.state
            .last_activity
            .store(self.clock.now_ms(), Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A response body that counts its request as in flight until it is sent (or dropped).
struct InFlight {
    body: Body,
    _guard: InFlightGuard,
}

struct InFlightGuard(Arc<ConnState>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl hyper::body::Body for InFlight {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Raises the soft open-file limit so `max_connections` (plus room for everything else
/// the process opens) fits, as far as the hard limit allows.
pub fn raise_fd_limit(max_connections: usize) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let want = max_connections as u64 + 1024;
    let cur = getrlimit(Resource::Nofile);
    let soft = cur.current.unwrap_or(u64::MAX);
    if soft >= want {
        return;
    }
    let target = cur.maximum.map_or(want, |hard| hard.min(want));
    if target <= soft {
        tracing::warn!(
            soft,
            wanted = want,
            "the open-file limit is below web.max_connections + 1024 and cannot be raised; raise LimitNOFILE / ulimit -n"
        );
        return;
    }
    if let Err(e) = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum: cur.maximum,
        },
    ) {
        tracing::warn!(error = %e, "cannot raise the open-file limit");
    }
}

/// Serves `router` on `listener` with `limits` and `security` until `shutdown`
/// completes, then drains within [`Limits::shutdown_grace`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    security: Arc<Security>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    raise_fd_limit(limits.max_connections);
    let clock = Clock(Instant::now());
    let registry = Arc::new(Registry::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut next_id: u64 = 0;
    let mut refused_logged = false;
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed; backing off");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            // Reap finished connection tasks as they end, so the set stays small.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        if !registry.make_room(limits.max_connections) {
            if !refused_logged {
                tracing::warn!(
                    max = limits.max_connections,
                    "every connection is busy at web.max_connections; closing new connections until one frees"
                );
                refused_logged = true;
            }
            drop(stream);
            continue;
        }
        refused_logged = false;
        let _ = stream.set_nodelay(true);
        next_id += 1;
        let id = next_id;
        let state = Arc::new(ConnState {
            last_activity: AtomicU64::new(clock.now_ms()),
            in_flight: AtomicU32::new(0),
            evict: Notify::new(),
            evicting: std::sync::atomic::AtomicBool::new(false),
        });
        registry.insert(id, state.clone());
        let conn = Connection {
            router: router.clone(),
            limits,
            security: security.clone(),
            state,
            clock,
            peer,
            stop: stop_rx.clone(),
        };
        let registry = registry.clone();
        tasks.spawn(async move {
            conn.run(stream).await;
            registry.remove(id);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let open = registry.len();
    if open > 0 {
        tracing::info!(open, "waiting for open connections to finish");
    }
    let drained = tokio::time::timeout(limits.shutdown_grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            left = tasks.len(),
            grace = ?limits.shutdown_grace,
            "connections still open after the shutdown grace; closing them"
        );
        tasks.abort_all();
    }
    Ok(())
}

/// One accepted connection.
struct Connection {
    router: Router,
    limits: Limits,
    security: Arc<Security>,
    state: Arc<ConnState>,
    clock: Clock,
    peer: SocketAddr,
    stop: watch::Receiver<bool>,
}

impl Connection {
    async fn run(self, stream: tokio::net::TcpStream) {
        let tracked = Tracked {
            inner: stream,
            state: self.state.clone(),
            clock: self.clock,
        };
        let Some(tls) = self.security.tls.clone() else {
            self.serve_http1(tracked).await;
            return;
        };
        // The handshake is bounded like a request head.
        let accepted =
            tokio::time::timeout(self.limits.header_read_timeout, tls.accept(tracked)).await;
        let stream = match accepted {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(peer = %self.peer, "TLS handshake timed out");
                return;
            }
        };
        let (_, session) = stream.get_ref();
        if let Err(why) = tls.check_client(session.peer_certificates()) {
            tracing::warn!(peer = %self.peer, reason = %why, "client certificate refused");
            return;
        }
        let h2 = session.alpn_protocol() == Some(b"h2");
        if h2 {
            self.serve_http2(stream).await;
        } else {
            self.serve_http1(stream).await;
        }
    }

    /// Waits for shutdown (a graceful close) or eviction / idleness (an immediate close).
    async fn watch(
        state: Arc<ConnState>,
        clock: Clock,
        idle: Duration,
        mut stop: watch::Receiver<bool>,
    ) -> Ending {
        let idle_ms = idle.as_millis() as u64;
        loop {
            let last = state.last_activity.load(Ordering::Relaxed);
            let due = last.saturating_add(idle_ms);
            let wait = Duration::from_millis(due.saturating_sub(clock.now_ms()));
            tokio::select! {
                () = state.evict.notified() => return Ending::Evicted,
                r = stop.changed() => {
                    if r.is_err() || *stop.borrow() {
                        return Ending::Shutdown;
                    }
                }
                () = tokio::time::sleep(wait) => {
                    if state.last_activity.load(Ordering::Relaxed) == last {
                        return Ending::Idle;
                    }
                }
            }
        }
    }

    async fn serve_http1<IO>(self, io: IO)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut b = hyper::server::conn::http1::Builder::new();
        b.timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout)
            .max_buf_size(self.limits.max_header_bytes.max(8192))
            .max_headers(MAX_HEADERS)
            .keep_alive(true);
        let conn = b.serve_connection(
            TokioIo::new(io),
            service(
                self.router.clone(),
                self.security.clone(),
                self.state.clone(),
                self.peer,
            ),
        );
        tokio::pin!(conn);
        let ending = Self::watch(
            self.state.clone(),
            self.clock,
            self.limits.idle_timeout,
            self.stop.clone(),
        );
        tokio::pin!(ending);
        tokio::select! {
            r = conn.as_mut() => { log_end(self.peer, r.err()); return; }
            e = &mut ending => match e {
                Ending::Shutdown => conn.as_mut().graceful_shutdown(),
                Ending::Evicted | Ending::Idle => {
                    tracing::debug!(peer = %self.peer, why = ?e, "connection closed");
                    return;
                }
            },
        }
        // After a graceful-shutdown request the serve loop bounds the wait.
        log_end(self.peer, conn.await.err());
    }

    async fn serve_http2<IO>(self, io: IO)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        b.timer(TokioTimer::new())
            .max_concurrent_streams(H2_MAX_STREAMS)
            .max_header_list_size(self.limits.max_header_bytes as u32)
            .max_send_buf_size(256 << 10)
            .initial_stream_window_size(64 << 10)
            .initial_connection_window_size(256 << 10)
            .keep_alive_interval(Some(self.limits.idle_timeout / 2))
            .keep_alive_timeout(self.limits.header_read_timeout);
        let conn = b.serve_connection(
            TokioIo::new(io),
            service(
                self.router.clone(),
                self.security.clone(),
                self.state.clone(),
                self.peer,
            ),
        );
        tokio::pin!(conn);
        let ending = Self::watch(
            self.state.clone(),
            self.clock,
            self.limits.idle_timeout,
            self.stop.clone(),
        );
        tokio::pin!(ending);
        tokio::select! {
            r = conn.as_mut() => { log_end(self.peer, r.err()); return; }
            e = &mut ending => match e {
                Ending::Shutdown => conn.as_mut().graceful_shutdown(),
                Ending::Evicted | Ending::Idle => return,
            },
        }
        log_end(self.peer, conn.await.err());
    }
}

/// The per-request service of one connection: web-config checks, then the router.
fn service(
    router: Router,
    security: Arc<Security>,
    state: Arc<ConnState>,
    peer: SocketAddr,
) -> impl hyper::service::Service<
    hyper::Request<Incoming>,
    Response = hyper::Response<InFlight>,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<hyper::Response<InFlight>, std::convert::Infallible>>
             + Send
             + use<>,
> + Clone
+ use<> {
    hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        let router = router.clone();
        let security = security.clone();
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        let guard = InFlightGuard(state.clone());
        async move {
            req.extensions_mut().insert(ConnectInfo(peer));
            let path = req.uri().path().to_string();
            let headers = req.headers().clone();
            let resp = match security.check(&path, &headers, peer).await {
                Ok(()) => match router.oneshot(req.map(Body::new)).await {
                    Ok(r) => r,
                    Err(never) => match never {},
                },
                Err(refusal) => refusal,
            };
            let resp = security.decorate(resp);
            Ok(resp.map(|body| InFlight {
                body,
                _guard: guard,
            }))
        }
    })
}

/// Why a connection is being closed by the server.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Shutdown,
    Evicted,
    Idle,
}

fn log_end(peer: SocketAddr, e: Option<hyper::Error>) {
    if let Some(e) = e {
        tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_picks_the_connection_idle_longest_and_spares_busy_ones() {
        let r = Registry::default();
        let mk = |last: u64, busy: u32| {
            Arc::new(ConnState {
                last_activity: AtomicU64::new(last),
                in_flight: AtomicU32::new(busy),
                evict: Notify::new(),
                evicting: std::sync::atomic::AtomicBool::new(false),
            })
        };
        let (a, b, c) = (mk(5, 0), mk(1, 1), mk(3, 0));
        r.insert(1, a.clone());
        r.insert(2, b.clone());
        r.insert(3, c.clone());
        assert!(r.make_room(4), "below the cap nothing is evicted");
        assert!(r.make_room(3));
        // c is the idle one with the oldest activity; b is older but busy.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(100), c.evict.notified())
                .await
                .expect("c evicted");
            assert!(
                tokio::time::timeout(Duration::from_millis(50), a.evict.notified())
                    .await
                    .is_err()
            );
            assert!(
                tokio::time::timeout(Duration::from_millis(50), b.evict.notified())
                    .await
                    .is_err()
            );
        });
        // c is leaving: it no longer counts, and is not chosen twice.
        assert!(r.make_room(4));
        a.in_flight.store(1, Ordering::Relaxed);
        assert!(!r.make_room(2), "all busy: the new connection is refused");
    }
}
