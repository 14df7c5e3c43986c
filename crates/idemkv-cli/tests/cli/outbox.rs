//! `idemkv outbox` run as an operator would on a store directory whose
//! service staged messages and whose relay met a destination that refuses
//! them: the keys listed by state (pending, dead; a delivered key's
//! messages are dropped from its completion, so it is not listed), the dead key
//! re-driven — the service's relay then delivers it — another given up;
//! a key that is not dead exits 1, never a panic.

use crate::support::{assert_fails, idemkv, scratch, stdout};
use idemkv::{
    backend::ClaimOptions,
    messaging::{KeyDelivery, Outbox, OutboxMessage, Produced, Relay, RelayConfig, Sink, SinkError, Staged},
    Config, Fingerprint, Store,
};
use std::sync::{Arc, Mutex};

/// Takes every message but those for `refused`.
#[derive(Clone, Default)]
struct Picky(Arc<Mutex<Vec<String>>>);

impl Sink for Picky {
    async fn deliver(&self, message: &Staged) -> Result<(), SinkError> {
        if message.destination == "refused" {
            return Err(SinkError::permanent("no such stream"));
        }
        self.0.lock().expect("lock").push(message.destination.clone());
        Ok(())
    }
}

async fn stage(outbox: &Outbox<Store>, key: &[u8], destination: &str) {
    let produced = Produced::Complete {
        response: b"201".to_vec(),
        messages: vec![OutboxMessage::new(destination, b"event".to_vec()), OutboxMessage::new("mail", b"x".to_vec())],
    };
    outbox.run(b"shop", key, Fingerprint::of(key), ClaimOptions::new(), |_| async { produced }).await.expect("run");
}

#[tokio::test]
async fn keys_listed_by_state_then_re_driven_or_given_up() {
    let dir = scratch();
    let path = dir.path().join("store");
    {
        let store = Arc::new(Store::open(&path, Config::new()).expect("open"));
        let outbox = Outbox::shared(Arc::clone(&store));
        stage(&outbox, b"k1", "orders").await;
        stage(&outbox, b"k2", "refused").await;
        stage(&outbox, b"k3", "refused").await;
        stage(&outbox, b"k4", "orders").await;
        let relay = Relay::new(Arc::clone(&store), Picky::default(), RelayConfig::new(["shop"]));
        for key in [&b"k1"[..], b"k2", b"k3"] {
            relay.deliver_key(b"shop", key).await.expect("deliver");
        }
    }
    let text = path.to_str().expect("utf-8");
    let run = |args: &[&str]| idemkv(&[&["outbox"], args, &["--scope", "shop", "--dir", text]].concat());
    let listed = stdout(&run(&["list"]));
    assert_eq!(
        listed.lines().collect::<Vec<_>>(),
        [
            "key=\"k2\" messages=2 dead at=0 attempts=1 error=\"no such stream\"",
            "key=\"k3\" messages=2 dead at=0 attempts=1 error=\"no such stream\"",
            "key=\"k4\" messages=2 pending next=0",
        ],
        "{listed}"
    );
    assert_eq!(stdout(&run(&["list", "--state", "pending"])).lines().count(), 1);
    assert_eq!(stdout(&run(&["list", "--state", "delivered"])), "", "delivered keys are compacted");
    assert_eq!(stdout(&run(&["retry", "k2"])), "\"k2\": re-driven\n");
    assert_eq!(stdout(&run(&["drop", "k3"])), "\"k3\": given up\n");
    assert_fails(&run(&["retry", "k1"]), 1, "is not stopped at a dead message", "a delivered key");
    assert_fails(&run(&["drop", "k9"]), 1, "is not stopped at a dead message", "an unknown key");

    // The service's relay delivers the re-driven key from its dead message.
    let store = Arc::new(Store::open(&path, Config::new()).expect("open"));
    let sink = Picky::default();
    let relay = Relay::new(Arc::clone(&store), sink.clone(), RelayConfig::new(["shop"]));
    let answer = relay.deliver_key(b"shop", b"k2").await.expect("deliver");
    assert_eq!(answer, Some(KeyDelivery::Dead), "refused again: the destination is still missing");
    assert_eq!(relay.deliver_key(b"shop", b"k3").await.expect("deliver"), None, "given up");
    drop((relay, store));
    assert!(stdout(&run(&["list", "--state", "dead"])).starts_with("key=\"k2\""));
}
