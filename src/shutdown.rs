//! The shutdown signal shared by the daemon (`run`) and the remediation receiver.
//!
//! The handlers are installed when [`signal`] is called, not when its future is first
//! polled: a signal that arrives right after start-up, before a server polls the future,
//! must still shut down gracefully instead of killing the process with the default action.

use std::future::Future;

/// A future that completes on SIGINT or SIGTERM. Call it inside the runtime, before
/// announcing readiness.
pub fn signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate()).ok();
    let int = signal(SignalKind::interrupt()).ok();
    async move {
        let wait = |s: Option<tokio::signal::unix::Signal>| async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = wait(term) => {},
            _ = wait(int) => {},
        }
        tracing::info!("shutdown signal received");
    }
}
