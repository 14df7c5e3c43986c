//! Waking `claim_wait`: a claim that waits marks the row (`waited`), and
//! the statement that finishes or removes a marked row calls
//! `pg_notify('idemkv', tag)`, delivered when its transaction commits
//! (never for a completion that rolls back). One dedicated connection per
//! backend listens on the channel and wakes the callers waiting on that
//! tag.
//!
//! Only marked rows notify: a `NOTIFY` takes a database-wide lock until
//! its transaction commits, which would serialize every completion if each
//! one notified. The listener starts with the first wait; a lost
//! connection wakes every waiter (each claims again) and is reconnected
//! with backoff, and every wait is also bounded by a poll interval, so a
//! notification lost with a connection costs at most one interval.

use super::connector::Connector;
use crate::backend::remote::wake::Waits;
use event_listener::Event;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio_postgres::tls::{MakeTlsConnect, TlsStream};
use tokio_postgres::{AsyncMessage, NoTls, Socket};

/// The channel every finishing statement notifies on.
const CHANNEL: &str = "idemkv";
/// The first and longest pause before the listener reconnects.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// How long connecting the listener may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The notification payload of `(scope, key)`, as `idemkv_tag` computes
/// it on the server: the first 16 bytes of SHA-256(u32 big-endian scope
/// length, scope, key), in hex.
pub(super) fn tag(scope: &[u8], key: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(u32::try_from(scope.len()).unwrap_or(u32::MAX).to_be_bytes());
    hasher.update(scope);
    hasher.update(key);
    hasher.finalize().iter().take(16).fold(String::with_capacity(32), |mut tag, byte| {
        let _ = write!(tag, "{byte:02x}");
        tag
    })
}

/// The listening side of one backend (shared by its clones and its
/// listener task).
#[derive(Debug)]
pub(super) struct Listening {
    waits: Waits,
    connect: tokio_postgres::Config,
    connector: Connector,
    /// The backend's runtime, where the listener runs.
    runtime: Handle,
    started: AtomicBool,
    ready: watch::Sender<bool>,
    stop: watch::Receiver<()>,
}

/// Held by every clone of a backend: when the last one drops, the
/// listener task ends and closes its connection.
#[derive(Debug)]
pub(super) struct Stop(#[allow(dead_code, reason = "held for its drop")] watch::Sender<()>);

impl Listening {
    pub(super) fn new(
        connect: tokio_postgres::Config,
        connector: Connector,
        runtime: Handle,
    ) -> (Arc<Listening>, Arc<Stop>) {
        let (stop_sender, stop) = watch::channel(());
        let (ready, _) = watch::channel(false);
        let started = AtomicBool::new(false);
        let listening = Listening { waits: Waits::default(), connect, connector, runtime, started, ready, stop };
        (Arc::new(listening), Arc::new(Stop(stop_sender)))
    }

    /// Joins the waiters of `tag`; the returned event fires at its
    /// notification or when the listener's connection is lost.
    pub(super) fn join(&self, tag: &str) -> Arc<Event> {
        self.waits.join(tag.as_bytes()).0
    }

    /// Leaves the waiters of `tag`.
    pub(super) fn leave(&self, tag: &str) {
        self.waits.leave(tag.as_bytes());
    }

    /// Starts the listener task once, then waits up to `patience` for it
    /// to listen; returns whether it does (if not, waits poll).
    pub(super) async fn ensure(self: &Arc<Self>, patience: Duration) -> bool {
        if !self.started.swap(true, Ordering::AcqRel) {
            // On the backend's runtime, not the first waiter's: it outlives
            // any one caller's.
            drop(self.runtime.spawn(listen(Arc::clone(self))));
        }
        let mut ready = self.ready.subscribe();
        let listening = tokio::time::timeout(patience, ready.wait_for(|listening| *listening)).await;
        matches!(listening, Ok(Ok(_)))
    }
}

/// The listener task: one session after another, until the backend drops.
async fn listen(listening: Arc<Listening>) {
    let mut stop = listening.stop.clone();
    let mut pause = RECONNECT_FIRST;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            listened = session(&listening) => if listened { pause = RECONNECT_FIRST },
        }
        listening.ready.send_replace(false);
        listening.waits.wake_all();
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(RECONNECT_MAX);
    }
}

/// One session over the backend's connector (plain or TLS).
async fn session(listening: &Listening) -> bool {
    match &listening.connector {
        Connector::Plain => session_over(listening, NoTls).await,
        #[cfg(feature = "tls")]
        Connector::Rustls(tls) => session_over(listening, tls.clone()).await,
    }
}

/// Connects, listens and hands notifications to the waiters until the
/// connection ends; returns whether it listened.
async fn session_over<T>(listening: &Listening, tls: T) -> bool
where
    T: MakeTlsConnect<Socket>,
    T::Stream: TlsStream + Unpin,
{
    let Ok(Ok((client, mut connection))) = tokio::time::timeout(CONNECT_TIMEOUT, listening.connect.connect(tls)).await
    else {
        return false;
    };
    let drive = async {
        while let Some(Ok(message)) = std::future::poll_fn(|context| connection.poll_message(context)).await {
            if let AsyncMessage::Notification(notification) = message {
                listening.waits.wake(notification.payload().as_bytes());
            }
        }
    };
    let subscribe = async {
        if client.batch_execute(&format!("LISTEN {CHANNEL}")).await.is_err() {
            return;
        }
        listening.ready.send_replace(true);
        std::future::pending::<()>().await;
    };
    tokio::select! {
        () = drive => {}
        () = subscribe => {}
    }
    *listening.ready.borrow()
}
