//! The server's own settings judged at connect, on real servers started
//! with each setting: an evicting `maxmemory-policy` is refused by default
//! (standalone and on any master of a Cluster), persistence that loses
//! answers at a crash is warned about (a `tracing` warning and the report),
//! a server with the promise's settings connects silently, a server whose
//! `CONFIG` is renamed away connects with an "unreadable" finding — and
//! each check does what [`ServerChecks`] sets.

#![cfg(all(feature = "tokio", feature = "redis", feature = "tracing"))]

use crate::common::redis::{free_port, RedisCluster, RedisServer};
use idemkv::backend::redis::{Check, RedisBackend, Risk, ServerChecks, ServerReport};
use idemkv::{Config, Error};
use std::sync::{Arc, Mutex};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Counts the warnings of target `idemkv`.
struct Warnings(Arc<Mutex<usize>>);

impl<S: Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        if event.metadata().target() == "idemkv" && *event.metadata().level() == Level::WARN {
            *self.0.lock().expect("count") += 1;
        }
    }
}

/// A server started with `extra` settings (after the fixture's safe ones,
/// so they win).
fn server(dir: &tempfile::TempDir, extra: &[&str]) -> RedisServer {
    RedisServer::start_with(dir.path(), free_port(), extra)
}

/// Connects with `checks` on this thread, counting the warnings emitted.
async fn connect(server: &RedisServer, checks: ServerChecks) -> (Result<RedisBackend, Error>, usize) {
    let warnings = Arc::new(Mutex::new(0));
    let subscriber = tracing_subscriber::registry().with(Warnings(Arc::clone(&warnings)));
    let _default = tracing::subscriber::set_default(subscriber);
    let connected = RedisBackend::connect_with(&server.url(), Config::new(), checks).await;
    let count = *warnings.lock().expect("count");
    (connected, count)
}

fn settings(report: &ServerReport) -> Vec<(&'static str, String, Risk)> {
    report.findings.iter().map(|finding| (finding.setting, finding.value.clone(), finding.risk)).collect()
}

fn refused(error: &Error) -> (&'static str, String) {
    match error {
        Error::UnsafeServerSetting { backend: "redis", setting, value, reason, .. } => {
            assert!(!reason.is_empty());
            (setting, value.clone())
        }
        other => panic!("expected UnsafeServerSetting, got {other}"),
    }
}

#[tokio::test]
async fn evicting_policies_are_refused_by_default() {
    for policy in ["allkeys-lru", "volatile-lru"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = server(&dir, &["--maxmemory-policy", policy]);
        let error = RedisBackend::connect(&server.url(), Config::new()).await.expect_err("an evicting policy");
        assert_eq!(refused(&error), ("maxmemory-policy", policy.to_string()));
        assert!(error.to_string().contains(&server.port.to_string()), "{error}");
        // Warned instead when asked: connects, and the report says it.
        let (backend, warnings) = connect(&server, ServerChecks::new().eviction(Check::Warn)).await;
        let backend = backend.expect("warned, not refused");
        assert_eq!(settings(backend.server_report()), [("maxmemory-policy", policy.to_string(), Risk::Eviction)]);
        assert_eq!(warnings, 1);
    }
}

#[tokio::test]
async fn lossy_persistence_is_warned_about_by_default() {
    let cases: [(&[&str], &str, &str); 3] = [
        (&["--appendfsync", "everysec"], "appendfsync", "everysec"),
        (&["--appendfsync", "no"], "appendfsync", "no"),
        (&["--appendonly", "no"], "appendonly", "no"),
    ];
    for (extra, setting, value) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = server(&dir, extra);
        let (backend, warnings) = connect(&server, ServerChecks::new()).await;
        let backend = backend.expect("warned by default");
        assert_eq!(settings(backend.server_report()), [(setting, value.to_string(), Risk::Persistence)]);
        assert_eq!(warnings, 1, "{setting} {value}");
        assert_eq!(backend.server_report().findings[0].server, format!("127.0.0.1:{}", server.port));
        // Refused when asked, silent when ignored (but still reported).
        let (error, _) = connect(&server, ServerChecks::new().persistence(Check::Refuse)).await;
        assert_eq!(refused(&error.expect_err("refused")), (setting, value.to_string()));
        let (backend, warnings) = connect(&server, ServerChecks::new().persistence(Check::Ignore)).await;
        assert_eq!(backend.expect("ignored").server_report().findings.len(), 1);
        assert_eq!(warnings, 0);
    }
}

#[tokio::test]
async fn the_promises_settings_connect_silently() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(&dir, &[]);
    let (backend, warnings) = connect(&server, ServerChecks::new()).await;
    let backend = backend.expect("safe settings");
    assert!(backend.server_report().is_clean(), "{:?}", backend.server_report());
    assert_eq!(warnings, 0);
}

#[tokio::test]
async fn a_server_without_config_cannot_be_checked_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Evicting, but hidden: the check cannot see it.
    let server = server(&dir, &["--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", ""]);
    let (backend, warnings) = connect(&server, ServerChecks::new()).await;
    let backend = backend.expect("unreadable is a warning by default");
    let found = settings(backend.server_report());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].0, found[0].2), ("CONFIG GET", Risk::Unreadable));
    assert!(found[0].1.contains("unknown command"), "{found:?}");
    assert_eq!(warnings, 1);
    let (error, _) = connect(&server, ServerChecks::new().unreadable(Check::Refuse)).await;
    assert_eq!(refused(&error.expect_err("refused")).0, "CONFIG GET");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_of_a_cluster_is_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = RedisCluster::start(dir.path());
    let backend = cluster.connect(Config::new()).await.expect("safe cluster");
    assert!(backend.server_report().is_clean(), "{:?}", backend.server_report());
    let last = cluster.nodes.last().expect("a node");
    assert_eq!(last.cli(&["config", "set", "maxmemory-policy", "allkeys-lfu"]).as_deref().map(str::trim), Some("OK"));
    let error = cluster.connect(Config::new()).await.expect_err("one master evicts");
    assert_eq!(refused(&error), ("maxmemory-policy", "allkeys-lfu".to_string()));
    match error {
        Error::UnsafeServerSetting { server, .. } => assert!(server.ends_with(&format!(":{}", last.port)), "{server}"),
        other => panic!("{other}"),
    }
}
