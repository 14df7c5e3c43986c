//! The Redis claim's fast path, checked on a real server by what the
//! server ran (`INFO commandstats`): a fresh key is claimed, and a replay,
//! a mismatch and a key in progress are answered, with no script; a
//! takeover and a Failed key run again go to the claim script (a
//! waiter's mark too: `redis_wakeups` checks what it does). A record the fast path wrote has the server's times: its token
//! is the server's time of the write, `get` and every script read the
//! same token and lease end, and a takeover's token is larger. A
//! Cluster takes the fast path too, on each key's own master.

#![cfg(all(feature = "tokio", feature = "redis"))]

use crate::common::redis::{RedisCluster, RedisServer};
use idemkv::backend::redis::RedisBackend;
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Fingerprint, ReusePolicy, State,
};
use std::time::Duration;

const LEASE: Duration = Duration::from_millis(300);

/// The server's time in µs.
fn server_micros(server: &RedisServer) -> u64 {
    let time = server.cli(&["TIME"]).expect("TIME");
    let mut parts = time.split_whitespace().map(|part| part.parse::<u64>().expect("a number"));
    let (seconds, micros) = (parts.next().expect("seconds"), parts.next().expect("micros"));
    seconds * 1_000_000 + micros
}

/// Runs `call` and answers it with the scripts (`EVALSHA`) and fast
/// claims (`EXEC`) the server ran for it.
async fn counted<T>(server: &RedisServer, call: impl std::future::Future<Output = T>) -> (T, u64, u64) {
    server.cli(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
    let answer = call.await;
    (answer, server.calls("evalsha"), server.calls("exec"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_common_claims_run_no_script_and_the_rest_run_the_claim_script() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let options = ClaimOptions::new().lease(LEASE).ttl(Duration::from_secs(60));
    let body = Fingerprint::of(b"body");

    // A fresh key: one transaction, no script; the token is the server's
    // time of the write (ms precision, in µs).
    let before = server_micros(&server);
    let (claimed, scripts, fast) = counted(&server, backend.claim(b"s", b"k1", body, options)).await;
    let after = server_micros(&server);
    let BackendClaim::Acquired { token, attempt: 1, recovered: false, checkpoint: None } = claimed.expect("claim")
    else {
        panic!("expected a first attempt");
    };
    assert_eq!((scripts, fast), (0, 1));
    assert!(token.token >= before / 1000 * 1000 && token.token <= after, "{before} <= {} <= {after}", token.token);
    assert_eq!(token.token % 1000, 0, "a fast claim's token has ms precision");

    // The scripts read the same record: `get` (a script) settles it.
    let record = backend.get(b"s", b"k1").await.expect("get").expect("present");
    assert_eq!((record.state, record.token, record.attempt), (State::Processing, token.token, 1));
    assert_eq!(record.created_ms * 1000, token.token);
    assert_eq!(record.deadline_ms, record.created_ms + u64::try_from(LEASE.as_millis()).expect("small"));

    // In progress and a mismatch: answered by the transaction alone.
    let (answer, scripts, fast) = counted(&server, backend.claim(b"s", b"k1", body, options)).await;
    assert!(matches!(answer.expect("claim"), BackendClaim::InProgress { .. }));
    assert_eq!((scripts, fast), (0, 1));
    let (answer, scripts, _) = counted(&server, backend.claim(b"s", b"k1", Fingerprint::of(b"other"), options)).await;
    assert!(matches!(answer.expect("claim"), BackendClaim::Mismatch));
    assert_eq!(scripts, 0);

    // The finish is a script; then the replay is answered without one.
    backend.complete(&token, b"done").await.expect("complete");
    let (answer, scripts, fast) = counted(&server, backend.claim(b"s", b"k1", body, options)).await;
    assert!(matches!(answer.expect("claim"), BackendClaim::Replay(response) if response == b"done"));
    assert_eq!((scripts, fast), (0, 1));

    // A lease to take over: the transaction finds it, the script takes it
    // over with a larger token.
    let Ok(BackendClaim::Acquired { token: first, .. }) = backend.claim(b"s", b"k2", body, options).await else {
        panic!("expected Acquired");
    };
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let (answer, scripts, fast) = counted(&server, backend.claim(b"s", b"k2", body, options)).await;
    let BackendClaim::Acquired { token: second, attempt: 2, recovered: true, .. } = answer.expect("claim") else {
        panic!("expected a takeover");
    };
    assert_eq!((scripts, fast), (1, 1));
    assert!(second.token > first.token, "{} then {}", first.token, second.token);
    assert!(matches!(backend.complete(&first, b"late").await, Err(idemkv::Error::LeaseLost { .. })));
    backend.complete(&second, b"second").await.expect("complete");

    // A Failed key run again is the script's too.
    let retry = options.reuse(ReusePolicy::RetryFailed);
    let Ok(BackendClaim::Acquired { token: failed, .. }) = backend.claim(b"s", b"k3", body, retry).await else {
        panic!("expected Acquired");
    };
    backend.fail(&failed, b"500").await.expect("fail");
    let (answer, scripts, _) = counted(&server, backend.claim(b"s", b"k3", body, retry)).await;
    assert!(matches!(answer.expect("claim"), BackendClaim::Acquired { attempt: 2, recovered: false, .. }));
    assert_eq!(scripts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_and_a_checkpoint_of_a_fast_claim_keep_its_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let options = ClaimOptions::new().lease(LEASE).ttl(Duration::from_secs(60));
    let Ok(BackendClaim::Acquired { token, .. }) = backend.claim(b"", b"job", Fingerprint::of(b"x"), options).await
    else {
        panic!("expected Acquired");
    };
    backend.checkpoint(&token, "step", b"1").await.expect("checkpoint");
    backend.renew(&token, Duration::from_secs(5)).await.expect("renew");
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    // The renewal held: still in progress, not taken over.
    let answer = backend.claim(b"", b"job", Fingerprint::of(b"x"), options).await.expect("claim");
    assert!(matches!(answer, BackendClaim::InProgress { .. }), "{answer:?}");
    let record = backend.get(b"", b"job").await.expect("get").expect("present");
    assert_eq!(record.token, token.token);
    backend.complete(&token, b"ok").await.expect("complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_takes_the_fast_path_on_the_keys_master() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = RedisCluster::start_async(dir.path()).await;
    let backend = cluster.connect(Config::new()).await.expect("connect");
    let options = ClaimOptions::new().lease(LEASE).ttl(Duration::from_secs(60));
    for node in &cluster.nodes {
        node.cli(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
    }
    // Keys spread over the three masters.
    for n in 0..12_u8 {
        let key = [b'k', n];
        let Ok(BackendClaim::Acquired { token, .. }) = backend.claim(b"", &key, Fingerprint::of(b"x"), options).await
        else {
            panic!("expected Acquired");
        };
        let replay = backend.claim(b"", &key, Fingerprint::of(b"x"), options).await.expect("claim");
        assert!(matches!(replay, BackendClaim::InProgress { .. }), "{replay:?}");
        backend.complete(&token, b"ok").await.expect("complete");
    }
    let count = |command: &str| cluster.nodes.iter().map(|node| node.calls(command)).sum::<u64>();
    assert_eq!((count("exec"), count("evalsha")), (24, 12), "24 fast claims, 12 completion scripts");
    assert!(cluster.nodes.iter().filter(|node| node.calls("exec") > 0).count() > 1, "the keys' own masters");
}

/// The claim script of the build before the fast path (commit 0df6c50),
/// as it is still loaded on a server whose fleet is half upgraded. KEYS
/// and ARGV as the backend's claim script.
const EARLIER_CLAIM: &str = r"
local function live(r, now)
  if r[1] == 'P' then return r[8] + r[9] > now end
  if r[1] == 'D' then return false end
  return r[8] > now
end
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now = math.floor(now_us / 1000)

local lease = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local packed = redis.call('GET', KEYS[1])
local attempt, recovered, created, last, point, waited = 1, 0, now, 0, '', 0
if packed then
  local r = cmsgpack.unpack(packed)
  if r[10] ~= ARGV[1] or r[11] ~= ARGV[2] then return {'X'} end
  last = r[5]
  if live(r, now) then
    if r[2] ~= ARGV[3] then return {'M'} end
    if r[1] == 'F' and ARGV[7] == 'retry' then
      attempt = r[3] + 1
    elseif r[1] ~= 'P' then
      return {'R', r[1], r[12]}
    elseif r[8] > now then
      if ARGV[8] == '1' and r[14] ~= 1 then
        r[14] = 1
        redis.call('SET', KEYS[1], cmsgpack.pack(r), 'KEEPTTL')
      end
      return {'I', string.format('%.0f', r[8] - now), r[3]}
    else
      attempt = r[3] + 1
      recovered = 1
      created = r[6]
      point = r[13] or ''
      waited = r[14] or 0
    end
  end
end
local token = math.max(last + 1, now_us)
local lease_end = now + lease
redis.call('SET', KEYS[1],
  cmsgpack.pack({'P', ARGV[3], attempt, recovered, token, created, now, lease_end, ttl, ARGV[1], ARGV[2], '', point, waited}),
  'PX', lease + ttl + tonumber(ARGV[6]))
return {'A', string.format('%.0f', token), attempt, recovered, string.format('%.0f', lease_end), point}
";

/// What the earlier build's claim script answers for `(b"", key)` with
/// the fingerprint of `body` (its first element: `A`, `R`, `I`, `M`).
async fn earlier_claim(server: &RedisServer, key: &[u8]) -> String {
    let client = ::redis::Client::open(server.url()).expect("client");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connection");
    let names: Vec<Vec<u8>> = ::redis::cmd("KEYS").arg("*:r").query_async(&mut connection).await.expect("KEYS");
    let [name] = names.as_slice() else { panic!("one record, found {}", names.len()) };
    let reply: Vec<::redis::Value> = ::redis::cmd("EVAL")
        .arg(EARLIER_CLAIM)
        .arg(1)
        .arg(name)
        .arg(b"")
        .arg(key)
        .arg(&Fingerprint::of(b"body").as_bytes()[..])
        .arg(LEASE.as_millis().to_string())
        .arg(60_000)
        .arg(3_600_000)
        .arg("replay")
        .arg("0")
        .query_async(&mut connection)
        .await
        .expect("EVAL");
    match reply.first() {
        Some(::redis::Value::BulkString(tag)) => String::from_utf8_lossy(tag).into_owned(),
        other => panic!("an answer: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_build_never_takes_over_a_fast_claim() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let options = ClaimOptions::new().lease(LEASE).ttl(Duration::from_secs(60));
    let body = Fingerprint::of(b"body");
    let Ok(BackendClaim::Acquired { token: first, .. }) = backend.claim(b"", b"k", body, options).await else {
        panic!("expected Acquired");
    };
    assert_eq!(earlier_claim(&server, b"k").await, "I", "in progress to the earlier build");
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    assert_eq!(earlier_claim(&server, b"k").await, "I", "past the lease, still not the earlier build's to take");
    // This build takes the ended lease over, and the record is settled.
    let Ok(BackendClaim::Acquired { token: second, attempt: 2, recovered: true, .. }) =
        backend.claim(b"", b"k", body, options).await
    else {
        panic!("expected a takeover");
    };
    assert!(second.token > first.token);
    assert_eq!(earlier_claim(&server, b"k").await, "I", "the takeover's lease, as the earlier build reads it");
    backend.complete(&second, b"done").await.expect("complete");
    assert_eq!(earlier_claim(&server, b"k").await, "R", "the replay, to the earlier build too");
}
