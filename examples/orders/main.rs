//! Effectively-once messaging end to end, on one Redis server: an orders
//! service stages an event with each order it takes, a relay publishes the
//! events to a Redis stream, and consumers in a consumer group apply each
//! order once to a ledger — however often the client retries, the relay
//! redelivers or a consumer dies.
//!
//! - `producer`: `POST /orders` with an `Idempotency-Key` runs once per
//!   key through [`Outbox::run`]: its completion (`201 order <key>`) and
//!   its event (the body, for the stream `orders`) are one transition.
//! - `relay`: delivers the staged events to the stream (`XADD`), at least
//!   once, in order per key.
//! - `consumer NAME`: reads the group `ledger` (`XREADGROUP`), takes over
//!   the entries of a consumer that died (`XAUTOCLAIM`), and hands each
//!   entry to an [`Inbox`]: an order is appended to the list `ledger` once
//!   (a duplicate is acknowledged without running); an order whose body
//!   starts with `poison` fails, and after three attempts it is a dead
//!   letter.
//!
//! ```text
//! redis-server --port 6379 --appendonly yes &
//! cargo build --example orders --features messaging,redis
//! target/debug/examples/orders producer redis://127.0.0.1:6379 127.0.0.1:3000 &
//! target/debug/examples/orders relay redis://127.0.0.1:6379 &
//! target/debug/examples/orders consumer redis://127.0.0.1:6379 c1 &
//! curl -si -X POST localhost:3000/orders -H 'Idempotency-Key: order-1' -d 'order-1: 2 apples'
//! curl -si -X POST localhost:3000/orders -H 'Idempotency-Key: order-1' -d 'order-1: 2 apples'  # replayed
//! redis-cli lrange ledger 0 -1                                                              # one entry
//! ```
//!
//! Each role prints one line when it is ready (the producer's names its
//! address; port 0 picks a free one) and runs until it is killed.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use idemkv::backend::redis::RedisBackend;
use idemkv::{
    backend::ClaimOptions,
    messaging::{
        Delivery, Handled, Inbox, Message, Outbox, OutboxMessage, Produced, RedisStreamSink, Relay, RelayConfig,
    },
    Config, Fingerprint, Once,
};
use redis::aio::ConnectionManager;
use redis::Value;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

const USAGE: &str = "usage: orders producer REDIS_URL ADDR | orders relay REDIS_URL | orders consumer REDIS_URL NAME";
/// The stream the events go to, and the scope of the orders' keys.
const STREAM: &str = "orders";
const SCOPE: &[u8] = b"orders";
/// The consumer group, and the inbox's consumer name.
const GROUP: &str = "ledger";
/// How long a consumer's entry stays pending before another consumer
/// takes it over; longer than the inbox's lease, so that a takeover finds
/// the dead consumer's lease ended.
const CLAIM_IDLE: Duration = Duration::from_millis(1500);
const LEASE: Duration = Duration::from_secs(1);

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let run = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["producer", url, address] => producer(url, address).await,
        ["relay", url] => relay(url).await,
        ["consumer", url, name] => consumer(url, name).await,
        _ => Err(USAGE.to_owned()),
    };
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("orders: {message}");
            ExitCode::from(2)
        }
    }
}

async fn backend(url: &str) -> Result<RedisBackend, String> {
    RedisBackend::connect(url, Config::new()).await.map_err(|error| format!("cannot connect to Redis: {error}"))
}

async fn producer(url: &str, address: &str) -> Result<(), String> {
    let listener =
        tokio::net::TcpListener::bind(address).await.map_err(|error| format!("cannot listen on {address}: {error}"))?;
    let address = listener.local_addr().map_err(|error| error.to_string())?;
    let outbox = Outbox::new(backend(url).await?).lease(LEASE);
    println!("orders producer on http://{address}");
    let app = Router::new().route("/orders", post(order)).with_state(Arc::new(outbox));
    axum::serve(listener, app).await.map_err(|error| format!("serving on {address}: {error}"))
}

/// `POST /orders`: once per `Idempotency-Key`, the order's answer and its
/// event in one completion.
async fn order(
    State(outbox): State<Arc<Outbox<RedisBackend>>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let Some(key) = headers.get("idempotency-key").map(|key| key.as_bytes().to_vec()) else {
        return (StatusCode::BAD_REQUEST, "an Idempotency-Key is required\n".into());
    };
    let event = body.to_vec();
    let take = |_attempt| async move {
        let response = format!("201 order {}\n", String::from_utf8_lossy(&event)).into_bytes();
        Produced::Complete { response, messages: vec![OutboxMessage::new(STREAM, event)] }
    };
    match outbox.run(SCOPE, &key, Fingerprint::of(&body), ClaimOptions::new(), take).await {
        Ok(answer @ (Once::Ran(_) | Once::Replayed(_))) => {
            (StatusCode::CREATED, String::from_utf8_lossy(answer.response().unwrap_or_default()).into_owned())
        }
        Ok(Once::InProgress { .. }) => (StatusCode::CONFLICT, "in progress, retry later\n".into()),
        Ok(Once::Mismatch) => (StatusCode::UNPROCESSABLE_ENTITY, "the key was used for another order\n".into()),
        Ok(_) => (StatusCode::INTERNAL_SERVER_ERROR, "not taken\n".into()),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")),
    }
}

async fn relay(url: &str) -> Result<(), String> {
    let sink = RedisStreamSink::connect(url).await.map_err(|error| error.to_string())?;
    let config = RelayConfig::new([SCOPE]).lease(LEASE).sweep_interval(Duration::from_millis(200));
    let relay = Relay::new(Arc::new(backend(url).await?), sink, config);
    println!("orders relay running");
    relay.run(std::future::pending()).await;
    Ok(())
}

async fn consumer(url: &str, name: &str) -> Result<(), String> {
    let inbox = Inbox::new(backend(url).await?).max_attempts(3).lease(LEASE);
    let client = redis::Client::open(url).map_err(|error| error.to_string())?;
    let mut redis = ConnectionManager::new(client).await.map_err(|error| error.to_string())?;
    // The group reads the stream from its start; another consumer may have
    // made it already.
    let created: redis::RedisResult<Value> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(STREAM)
        .arg(GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut redis)
        .await;
    if let Err(error) = created {
        if error.code() != Some("BUSYGROUP") {
            return Err(format!("XGROUP CREATE: {error}"));
        }
    }
    println!("orders consumer {name} running");
    loop {
        // A dead consumer's entries first, then new ones.
        let mut claim = redis::cmd("XAUTOCLAIM");
        claim.arg(STREAM).arg(GROUP).arg(name).arg(CLAIM_IDLE.as_millis().to_string()).arg("0-0").arg("COUNT").arg(10);
        let claimed: Value = claim.query_async(&mut redis).await.map_err(|error| format!("XAUTOCLAIM: {error}"))?;
        let mut entries = match claimed {
            Value::Array(parts) => parts.into_iter().nth(1).map(stream_entries).unwrap_or_default(),
            _ => Vec::new(),
        };
        if entries.is_empty() {
            let mut read = redis::cmd("XREADGROUP");
            read.arg("GROUP").arg(GROUP).arg(name).arg("COUNT").arg(10).arg("BLOCK").arg(200);
            read.arg("STREAMS").arg(STREAM).arg(">");
            let reply: Value = read.query_async(&mut redis).await.map_err(|error| format!("XREADGROUP: {error}"))?;
            entries = read_group_entries(reply);
        }
        for (entry, id, payload) in entries {
            let delivery = inbox.handle(GROUP, &id, &payload, |message| apply(redis.clone(), message)).await;
            match delivery {
                Ok(delivery) if delivery.ack() => {
                    let _: Value = redis::cmd("XACK")
                        .arg(STREAM)
                        .arg(GROUP)
                        .arg(&entry)
                        .query_async(&mut redis)
                        .await
                        .map_err(|error| format!("XACK: {error}"))?;
                    if matches!(delivery, Delivery::DeadLettered { .. }) {
                        println!("dead letter {}", String::from_utf8_lossy(&id));
                    }
                }
                // Left pending: it comes back by XAUTOCLAIM.
                Ok(_) => {}
                Err(error) => eprintln!("orders: {error}; the entry stays pending"),
            }
        }
    }
}

/// The effect: the order appended to the ledger once. A run that took
/// over from a consumer that died looks first whether that one got as far
/// as the append.
async fn apply(mut redis: ConnectionManager, message: Message) -> Handled {
    if message.payload.starts_with(b"poison") {
        return Handled::Failed("a poison order".into());
    }
    if message.recovered {
        let found: redis::RedisResult<Value> =
            redis::cmd("LPOS").arg("ledger").arg(&message.payload).query_async(&mut redis).await;
        match found {
            Ok(Value::Int(_)) => return Handled::Processed,
            Ok(_) => {}
            Err(error) => return Handled::Failed(format!("LPOS: {error}")),
        }
    }
    // A window for a kill between the effect and the inbox's completion.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let appended: redis::RedisResult<Value> =
        redis::cmd("RPUSH").arg("ledger").arg(&message.payload).query_async(&mut redis).await;
    match appended {
        Ok(_) => {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Handled::Processed
        }
        Err(error) => Handled::Failed(format!("RPUSH: {error}")),
    }
}

/// `(entry id, message id, payload)` of an `XREADGROUP` reply.
fn read_group_entries(reply: Value) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let Value::Array(streams) = reply else { return Vec::new() };
    streams
        .into_iter()
        .filter_map(|stream| match stream {
            Value::Array(parts) => parts.into_iter().nth(1),
            _ => None,
        })
        .flat_map(stream_entries)
        .collect()
}

/// `(entry id, message id, payload)` of a list of stream entries.
fn stream_entries(entries: Value) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let Value::Array(entries) = entries else { return Vec::new() };
    entries
        .into_iter()
        .filter_map(|entry| {
            let Value::Array(parts) = entry else { return None };
            let mut parts = parts.into_iter();
            let entry = bytes(parts.next()?)?;
            let Value::Array(fields) = parts.next()? else { return None };
            let (mut id, mut payload) = (None, None);
            for pair in fields.chunks(2) {
                match (pair.first().cloned().and_then(bytes), pair.get(1).cloned().and_then(bytes)) {
                    (Some(name), Some(value)) if name == b"id" => id = Some(value),
                    (Some(name), Some(value)) if name == b"payload" => payload = Some(value),
                    _ => {}
                }
            }
            Some((String::from_utf8_lossy(&entry).into_owned(), id?, payload?))
        })
        .collect()
}

fn bytes(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(text) => Some(text.into_bytes()),
        _ => None,
    }
}
