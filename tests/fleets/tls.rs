//! TLS to Redis and PostgreSQL (feature `tls`), against real servers that
//! take TLS only, with certificates this test makes (a CA of its own, a
//! server certificate for 127.0.0.1 and localhost): a backend that trusts
//! the CA connects and runs the contract; one that trusts another CA, or
//! the Mozilla roots, is refused at the handshake; a plain connection to
//! the TLS-only server is refused; a `rediss://` URL is not taken for a
//! plain one. On PostgreSQL the pool, the listener and the reaper all
//! connect over TLS (the server takes nothing else).
#![cfg(feature = "tls")]

use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend, Tls},
    Config, Error, Fingerprint,
};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A CA (its certificate as PEM) and a server certificate and key it
/// signed, for 127.0.0.1 and localhost.
struct Certificates {
    ca: String,
    cert: String,
    key: String,
}

fn ca() -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, "idemkv test CA");
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA")
}

fn certificates() -> Certificates {
    let ca = ca();
    let key = KeyPair::generate().expect("key");
    let params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).expect("params");
    let cert = params.signed_by(&key, &ca).expect("server certificate");
    Certificates { ca: ca.pem(), cert: cert.pem(), key: key.serialize_pem() }
}

/// The contract's basic round on a TLS connection: acquire, complete,
/// replay.
async fn round<B: IdempotencyBackend>(backend: &B) {
    let options = ClaimOptions::new().lease(Duration::from_secs(5));
    let fingerprint = Fingerprint::of(b"POST /charges");
    let BackendClaim::Acquired { token, .. } = backend.claim(b"", b"tls", fingerprint, options).await.expect("claim")
    else {
        panic!("a fresh key is acquired");
    };
    backend.complete(&token, b"201 over tls").await.expect("complete");
    match backend.claim(b"", b"tls", fingerprint, options).await.expect("claim") {
        BackendClaim::Replay(response) => assert_eq!(response, b"201 over tls"),
        other => panic!("expected a replay, got {other:?}"),
    }
}

fn refused_at_handshake<T: std::fmt::Debug>(outcome: Result<T, Error>, what: &str) {
    match outcome {
        Err(Error::Backend { .. }) => {}
        other => panic!("{what}: expected a refused connection, got {other:?}"),
    }
}

/// A `redis-server` that takes TLS only, on a free loopback port.
struct TlsRedis {
    port: u16,
    child: Child,
}

impl TlsRedis {
    fn start(dir: &Path, certificates: &Certificates) -> TlsRedis {
        std::fs::create_dir_all(dir).expect("dir");
        for (name, contents) in
            [("ca.pem", &certificates.ca), ("cert.pem", &certificates.cert), ("key.pem", &certificates.key)]
        {
            std::fs::write(dir.join(name), contents).expect("write");
        }
        let port = crate::common::redis::free_port();
        let path = |name: &str| dir.join(name).to_str().expect("utf-8").to_string();
        let child = Command::new("redis-server")
            .args(["--port", "0", "--tls-port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--tls-cert-file", &path("cert.pem"), "--tls-key-file", &path("key.pem")])
            .args(["--tls-ca-cert-file", &path("ca.pem"), "--tls-auth-clients", "no"])
            .args(["--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"])
            .args(["--dir", &path(""), "--logfile", "server.log"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(20), "the TLS redis-server did not listen in 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        TlsRedis { port, child }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_with_a_private_ca() {
    use idemkv::backend::redis::RedisBackend;
    let dir = tempfile::tempdir().expect("tempdir");
    let certificates = certificates();
    let server = TlsRedis::start(dir.path(), &certificates);
    let url = format!("rediss://127.0.0.1:{}", server.port);
    let trusted = Tls::ca_pem(certificates.ca.as_bytes()).expect("the CA");
    let backend = RedisBackend::connect_tls(&url, Config::new(), &trusted).await.expect("connect over TLS");
    round(&backend).await;

    let other_ca = Tls::ca_pem(ca().pem().as_bytes()).expect("another CA");
    refused_at_handshake(RedisBackend::connect_tls(&url, Config::new(), &other_ca).await, "another CA");
    refused_at_handshake(RedisBackend::connect_tls(&url, Config::new(), &Tls::webpki_roots()).await, "public roots");
    refused_at_handshake(RedisBackend::connect(&url, Config::new()).await, "rediss:// on the public roots");
    let plain = format!("redis://127.0.0.1:{}", server.port);
    refused_at_handshake(RedisBackend::connect(&plain, Config::new()).await, "plain text to a TLS port");
    let mixed = RedisBackend::connect_tls(&plain, Config::new(), &trusted).await;
    assert!(matches!(mixed, Err(Error::InvalidConfig(ref why)) if why.contains("rediss://")), "{mixed:?}");
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_with_a_private_ca() {
    use idemkv::backend::postgres::PostgresBackend;
    let dir = tempfile::tempdir().expect("tempdir");
    let certificates = certificates();
    let server = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        let (cert, key) = (certificates.cert.clone(), certificates.key.clone());
        move || crate::common::postgres::PostgresServer::start_tls(&dir, &cert, &key)
    })
    .await
    .expect("server");
    let url = format!("{}?sslmode=require", server.url());
    let trusted = Tls::ca_pem(certificates.ca.as_bytes()).expect("the CA");
    let backend = PostgresBackend::connect_tls(&url, Config::new(), &trusted).await.expect("connect over TLS");
    round(&backend).await;
    // The listening connection is over TLS too: a wait is woken.
    let options = ClaimOptions::new().lease(Duration::from_secs(5));
    let fingerprint = Fingerprint::of(b"waited");
    let BackendClaim::Acquired { token, .. } =
        backend.claim(b"", b"waited", fingerprint, options).await.expect("claim")
    else {
        panic!("acquired");
    };
    let waiter = {
        let backend = backend.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = backend.claim(b"", b"waited", fingerprint, options.wait(Some(Duration::from_secs(8)))).await;
            (answer, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(1600)).await;
    backend.complete(&token, b"woken").await.expect("complete");
    let completed = Instant::now();
    let (answer, _) = waiter.await.expect("waiter");
    assert!(matches!(answer, Ok(BackendClaim::Replay(ref response)) if response == b"woken"), "{answer:?}");
    assert!(completed.elapsed() < Duration::from_millis(500), "woken by the notification, not a poll");

    // So is the reaper's: it takes the fleet's lock.
    let started = Instant::now();
    while !backend.reaping() {
        assert!(started.elapsed() < Duration::from_secs(10), "the reaper did not connect over TLS in 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let other_ca = Tls::ca_pem(ca().pem().as_bytes()).expect("another CA");
    refused_at_handshake(PostgresBackend::connect_tls(&url, Config::new(), &other_ca).await, "another CA");
    refused_at_handshake(PostgresBackend::connect(&server.url(), Config::new()).await, "plain text to hostssl only");
}

#[test]
fn a_pem_without_a_certificate_is_refused() {
    assert!(matches!(Tls::ca_pem(b""), Err(Error::InvalidConfig(_))));
    assert!(matches!(Tls::ca_pem(certificates().key.as_bytes()), Err(Error::InvalidConfig(_))), "a key is no CA");
}
