//! The orders example end to end on a real Redis server, every role a
//! process of its own: a producer taking orders over HTTP (each sent twice
//! at once, as a client that retries), a relay publishing their events to
//! a stream, two consumers in a consumer group applying them to a ledger
//! through the inbox. A consumer is killed (`SIGKILL`) mid-batch and the relay
//! mid-delivery, both started again, and every entry of the stream is
//! then delivered once more (a redelivery storm). N orders make exactly N
//! ledger entries, every poison order ends as a dead letter, and nothing
//! is left pending.
#![cfg(all(feature = "messaging", feature = "redis"))]

use crate::common::redis::RedisServer;
use idemkv::backend::redis::RedisBackend;
use idemkv::{messaging::Inbox, Config};
use redis::Value;
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The example binary (`target/<profile>/examples/orders`), built first
/// if need be.
fn example() -> PathBuf {
    crate::common::examples::example("orders")
}

/// One role's process, killed (`SIGKILL`) when dropped.
struct Role {
    child: Child,
    /// The first line it printed.
    line: String,
}

impl Drop for Role {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(args: &[&str]) -> Role {
    let mut child = Command::new(example())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the example");
    let stdout = child.stdout.take().expect("stdout");
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    reader.read_line(&mut line).expect("the line printed at start");
    assert!(line.starts_with("orders "), "{args:?}: {line:?}");
    // The rest of its output is drained, so that it never blocks on a
    // full pipe.
    std::thread::spawn(move || for _ in reader.lines() {});
    Role { child, line }
}

/// Sends order `index` twice at once; both answers must be its own (201,
/// or 409 while the other copy runs, then retried).
async fn order(client: &reqwest::Client, base: &str, index: usize) {
    let key = format!("order-{index}");
    let body = if index % 10 == 9 { format!("poison {index}") } else { format!("order {index}: {index} apples") };
    let send = || async {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let sent = client.post(format!("{base}/orders")).header("Idempotency-Key", &key).body(body.clone()).send();
            if let Ok(response) = sent.await {
                let status = response.status().as_u16();
                let text = response.text().await.unwrap_or_default();
                if status == 201 {
                    assert_eq!(text, format!("201 order {body}\n"));
                    return;
                }
                assert_eq!(status, 409, "{key}: {text}");
            }
            assert!(Instant::now() < deadline, "{key} was never taken");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::join!(send(), send());
}

/// Polls `look` every millisecond until it is true (true) or `limit`
/// passed (false).
async fn until<F, Fut>(limit: Duration, mut look: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if look().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

/// The id of the first entry of an `XRANGE`-shaped reply.
fn entry_id(reply: &Value) -> Option<Vec<u8>> {
    let Value::Array(entries) = reply else { return None };
    let Some(Value::Array(parts)) = entries.first() else { return None };
    match parts.first() {
        Some(Value::BulkString(id)) => Some(id.clone()),
        _ => None,
    }
}

/// A field of the first group of an `XINFO GROUPS` reply.
fn group_field(reply: &Value, name: &str) -> Option<Vec<u8>> {
    let Value::Array(groups) = reply else { return None };
    let pairs: Vec<&Value> = match groups.first()? {
        Value::Array(fields) => fields.iter().collect(),
        Value::Map(pairs) => pairs.iter().flat_map(|(key, value)| [key, value]).collect(),
        _ => return None,
    };
    let text = |value: &Value| match value {
        Value::BulkString(value) => Some(value.clone()),
        Value::SimpleString(value) => Some(value.clone().into_bytes()),
        _ => None,
    };
    pairs.chunks(2).find_map(|pair| match pair {
        [Value::BulkString(key), value] if key.as_slice() == name.as_bytes() => text(value),
        [Value::SimpleString(key), value] if key == name => text(value),
        _ => None,
    })
}

/// What the test looks at: the ledger, the dead letters, the entries
/// pending in the group, and whether the group read the whole stream.
struct Look {
    ledger: Vec<String>,
    dead: usize,
    pending: i64,
    read_all: bool,
}

async fn look(redis: &mut redis::aio::MultiplexedConnection, inbox: &Inbox<RedisBackend>) -> Look {
    let ledger: Vec<String> =
        redis::cmd("LRANGE").arg("ledger").arg(0).arg(-1).query_async(redis).await.expect("ledger");
    let dead = inbox.dead_letters("ledger", None, 100).await.expect("dead letters").len();
    let pending: Value = redis::cmd("XPENDING").arg("orders").arg("ledger").query_async(redis).await.expect("pending");
    let pending = match pending {
        Value::Array(parts) => match parts.first() {
            Some(Value::Int(count)) => *count,
            _ => -1,
        },
        _ => -1,
    };
    let last: Value = redis::cmd("XREVRANGE")
        .arg("orders")
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(redis)
        .await
        .expect("last");
    let last = entry_id(&last);
    let groups: Value = redis::cmd("XINFO").arg("GROUPS").arg("orders").query_async(redis).await.expect("groups");
    let read_all = last.is_some() && group_field(&groups, "last-delivered-id") == last;
    Look { ledger, dead, pending, read_all }
}

/// Adds every entry of the stream to it once more (a redelivery storm);
/// how many.
async fn redeliver_all(redis: &mut redis::aio::MultiplexedConnection) -> usize {
    let entries: Value = redis::cmd("XRANGE").arg("orders").arg("-").arg("+").query_async(redis).await.expect("xrange");
    let Value::Array(entries) = entries else { panic!("XRANGE: {entries:?}") };
    for entry in &entries {
        let Value::Array(parts) = entry else { panic!("an entry: {entry:?}") };
        let Some(Value::Array(fields)) = parts.get(1) else { panic!("fields: {parts:?}") };
        let mut again = redis::cmd("XADD");
        again.arg("orders").arg("*");
        for field in fields {
            let Value::BulkString(bytes) = field else { panic!("a field: {field:?}") };
            again.arg(bytes);
        }
        let _: Value = again.query_async(redis).await.expect("XADD");
    }
    entries.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_orders_make_n_ledger_entries_through_kills_and_a_redelivery_storm() {
    const ORDERS: usize = 60;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&dir.path().join("redis"));
    let url = server.url();
    let producer = start(&["producer", &url, "127.0.0.1:0"]);
    let base = producer.line.split_whitespace().find(|word| word.starts_with("http://")).expect("address").to_owned();
    let mut relay = start(&["relay", &url]);
    let mut first = start(&["consumer", &url, "a"]);
    let _second = start(&["consumer", &url, "b"]);
    let client = reqwest::Client::new();
    let mut redis =
        redis::Client::open(url.as_str()).expect("url").get_multiplexed_async_connection().await.expect("redis");

    for wave in 0..3 {
        let orders = (wave * 20..wave * 20 + 20).map(|index| order(&client, &base, index));
        futures_util::future::join_all(orders).await;
        match wave {
            0 => {
                // Mid-batch: once consumer a holds entries it has not
                // acknowledged.
                assert!(holds_unacknowledged(&redis, "a").await, "consumer a never held an entry");
                drop(first);
                first = start(&["consumer", &url, "a"]);
            }
            1 => {
                // Mid-delivery: once some of this wave's events are in the
                // stream and not all.
                assert!(stream_is_midway(&redis).await, "the relay was never seen half-way through the wave");
                drop(relay);
                relay = start(&["relay", &url]);
            }
            _ => {}
        }
    }

    let expected: HashSet<String> =
        (0..ORDERS).filter(|index| index % 10 != 9).map(|index| format!("order {index}: {index} apples")).collect();
    let inbox = Inbox::new(RedisBackend::connect(&url, Config::new()).await.expect("backend"));
    settle_through_a_redelivery_storm(&mut redis, &inbox, &expected, ORDERS).await;
    drop((relay, first, producer));
}

/// Whether consumer `name` is seen holding entries it has not
/// acknowledged within 10 s.
async fn holds_unacknowledged(redis: &redis::aio::MultiplexedConnection, name: &str) -> bool {
    until(Duration::from_secs(10), || async {
        let held: Value = redis::cmd("XPENDING")
            .arg("orders")
            .arg("ledger")
            .arg("-")
            .arg("+")
            .arg(10)
            .arg(name)
            .query_async(&mut redis.clone())
            .await
            .expect("XPENDING");
        matches!(held, Value::Array(entries) if !entries.is_empty())
    })
    .await
}

/// Whether the stream is seen holding some of the second wave's events
/// and not all within 10 s.
async fn stream_is_midway(redis: &redis::aio::MultiplexedConnection) -> bool {
    until(Duration::from_secs(10), || async {
        let length: i64 = redis::cmd("XLEN").arg("orders").query_async(&mut redis.clone()).await.expect("XLEN");
        length > 20 && length < 40
    })
    .await
}

/// Waits until the group read the whole stream, every order is applied or
/// dead and nothing is pending; then adds every entry to the stream once
/// more (a redelivery storm) and waits again: the ledger then holds every
/// expected order exactly once.
async fn settle_through_a_redelivery_storm(
    redis: &mut redis::aio::MultiplexedConnection,
    inbox: &Inbox<RedisBackend>,
    expected: &HashSet<String>,
    orders: usize,
) {
    let mut stormed = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = look(redis, inbox).await;
        if now.read_all && now.ledger.len() >= expected.len() && now.dead == orders / 10 && now.pending == 0 {
            if stormed {
                let unique: HashSet<String> = now.ledger.iter().cloned().collect();
                assert_eq!(now.ledger.len(), unique.len(), "an order applied twice: {:?}", now.ledger);
                assert_eq!(&unique, expected, "every order applied once");
                break;
            }
            assert!(redeliver_all(redis).await >= orders, "every order's event is in the stream");
            stormed = true;
        }
        assert!(
            Instant::now() < deadline,
            "not settled: {} of {} in the ledger, {} dead letters, {} pending, all read: {}",
            now.ledger.len(),
            expected.len(),
            now.dead,
            now.pending,
            now.read_all
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
