//! Claim, replay, in-progress and mismatch on a real store directory.
//!
//! ```text
//! cargo run --example quickstart [DIR]
//! ```
//!
//! DIR defaults to a fresh temporary directory; pass one to look at the
//! files afterwards (`ls -R DIR`).

use idemkv::{Claim, ClaimRequest, Config, Fingerprint, Store};
use std::path::PathBuf;
use std::time::Duration;

fn describe(claim: &Claim) -> String {
    match claim {
        Claim::Acquired(lease) => format!("Acquired   token={} attempt={}", lease.token(), lease.attempt()),
        Claim::Replay(record) => {
            format!("Replay     {:?} {:?}", record.state, String::from_utf8_lossy(&record.response))
        }
        Claim::InProgress { retry_after, .. } => format!("InProgress retry after {retry_after:?}"),
        Claim::Mismatch => "Mismatch   (same key, different request: HTTP 422)".to_string(),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temporary = tempfile::tempdir()?;
    let dir = std::env::args().nth(1).map_or_else(|| temporary.path().join("store"), PathBuf::from);
    println!("store directory: {}", dir.display());

    let payment = Fingerprint::builder().part(b"POST").part(b"/payments").part(br#"{"amount":1000}"#).finish();
    let request = ClaimRequest::new("8e03978e-40d5-43e8", payment).scope("account-42").lease(Duration::from_secs(30));
    let key = format!("{} / {}", "account-42", "8e03978e-40d5-43e8");

    let store = Store::open(&dir, Config::new())?;
    let first = store.claim(&request)?;
    println!("1. first request          {key}: {}", describe(&first));
    let Claim::Acquired(lease) = first else {
        println!("   (the key was already known in {}: run with a new directory)", dir.display());
        return Ok(());
    };
    println!("2. concurrent duplicate   {key}: {}", describe(&store.claim(&request)?));
    lease.complete(br#"201 {"payment":"pay_1","amount":1000}"#)?;
    println!("   ... the first request charged the card and completed");
    println!("3. retry                  {key}: {}", describe(&store.claim(&request)?));

    let other_body = Fingerprint::builder().part(b"POST").part(b"/payments").part(br#"{"amount":9999}"#).finish();
    let reused = ClaimRequest::new("8e03978e-40d5-43e8", other_body).scope("account-42");
    println!("4. same key, other body   {key}: {}", describe(&store.claim(&reused)?));
    store.close()?;

    let store = Store::open(&dir, Config::new())?;
    println!("5. retry after a restart  {key}: {}", describe(&store.claim(&request)?));
    let stats = store.stats();
    println!("   live records: {}, fsyncs since reopen: {}", stats.live_records, stats.fsyncs);
    Ok(())
}
