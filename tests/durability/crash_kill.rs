//! Proof by killing: the test re-executes its own binary as a child that
//! works on a store with `Sync` durability from several threads and prints a
//! line for every acknowledged call, while another thread writes short-lived
//! records and runs compaction passes back to back. The parent SIGKILLs it at
//! a random moment (sometimes while it is still opening the store, often in
//! the middle of a compaction), reopens the directory and checks that
//! nothing acknowledged was lost and nothing released came back.
//!
//! Rounds share a directory (15 at a time), so each child also recovers
//! from the previous kill. The directories' stores have four shards and
//! one by turns.
//! `IDEMKV_KILL_ROUNDS` sets the number of rounds (default 30).

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, State, Store};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const CHILD_DIR: &str = "IDEMKV_KILL_CHILD_DIR";
const CHILD_ROUND: &str = "IDEMKV_KILL_CHILD_ROUND";
const CHILD_SHARDS: &str = "IDEMKV_KILL_CHILD_SHARDS";
/// Rounds a directory serves.
const ROUNDS_A_DIRECTORY: u64 = 15;
const THREADS: usize = 4;

fn config(shards: u32) -> Config {
    Config::new()
        .shards(shards)
        .durability(Durability::Sync)
        .segment_bytes(16 * 1024)
        .response_bytes_max(4096)
        .compaction_interval(None)
        .compaction_bytes_per_second(0)
}

/// The action a key's holder takes, encoded in the key's name.
fn action_of(key: &str) -> &str {
    key.rsplit('-').next().unwrap_or("")
}

/// The response stored for `key` under `token`: derived, so the parent can
/// check it byte for byte.
fn response_for(key: &str, token: u64) -> Vec<u8> {
    let unit = format!("{key}/{token};");
    unit.repeat(1 + (token % 40) as usize).into_bytes()
}

fn fingerprint(key: &str) -> Fingerprint {
    Fingerprint::of(key.as_bytes())
}

/// The child: works until killed.
fn child(dir: &Path, round: u64, shards: u32) -> ! {
    let store = Store::open(dir, config(shards)).expect("child open");
    // On its own line: the test harness may have printed a partial line.
    println!("\nCHILD-OPEN");
    std::thread::scope(|scope| {
        scope.spawn(|| churn_and_compact(&store, round));
        for thread in 0..THREADS {
            let store = store.clone();
            scope.spawn(move || {
                let actions = ["complete", "fail", "release", "complete"];
                for n in 0.. {
                    let key = format!("r{round}-t{thread}-{n}-{}", actions[n % actions.len()]);
                    work(&store, &key);
                }
            });
        }
    });
    std::process::exit(0)
}

/// Short-lived records (not in the ledger) give compaction work; the
/// passes run back to back, so kills land inside them.
fn churn_and_compact(store: &Store, round: u64) {
    for n in 0u64.. {
        for index in 0..20 {
            let key = format!("churn-r{round}-{n}-{index}");
            let request = ClaimRequest::new(&key, fingerprint(&key)).ttl(Duration::from_millis(5));
            if let Claim::Acquired(lease) = store.claim(&request).expect("claim") {
                lease.complete(&[b'c'; 500]).expect("complete");
            }
        }
        let report = store.compact().expect("compact");
        if report.bytes_reclaimed > 0 {
            println!("\nCHILD-COMPACTED");
        }
    }
}

fn work(store: &Store, key: &str) {
    let request = ClaimRequest::new(key, fingerprint(key));
    let Claim::Acquired(lease) = store.claim(&request).expect("claim") else { panic!("fresh key not acquired") };
    let token = lease.token();
    ack(&format!("A {key} {token}"));
    match action_of(key) {
        "complete" => {
            lease.complete(&response_for(key, token)).expect("complete");
            ack(&format!("C {key} {token}"));
        }
        "fail" => {
            lease.fail(&response_for(key, token)).expect("fail");
            ack(&format!("F {key} {token}"));
        }
        _ => {
            lease.release().expect("release");
            ack(&format!("R {key} {token}"));
            // A corrected retry runs and completes.
            let Claim::Acquired(lease) = store.claim(&request).expect("claim") else {
                panic!("released key not acquired")
            };
            let token = lease.token();
            ack(&format!("A {key} {token}"));
            lease.complete(&response_for(key, token)).expect("complete");
            ack(&format!("C {key} {token}"));
        }
    }
    // Every finished key replays its response.
    let Claim::Replay(record) = store.claim(&request).expect("claim") else { panic!("finished key not replayed") };
    assert_eq!(record.response, response_for(key, record.token));
}

fn ack(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ACK {line}").expect("stdout");
    out.flush().expect("flush");
}

/// What the acknowledged calls say a key must be.
#[derive(Debug, Clone, PartialEq)]
enum Acked {
    Processing(u64),
    Finished(State, u64),
    Released(u64),
}

/// A small xorshift generator; the seed is printed so a failure can be rerun.
struct Random(u64);

impl Random {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// The acknowledged calls of one child, and how many compaction passes of
/// it reclaimed space.
fn run_child(dir: &Path, round: u64, shards: u32, kill_after: Duration, wait_for_open: bool) -> (Vec<String>, usize) {
    let mut child = Command::new(std::env::current_exe().expect("current exe"))
        .args([
            "--exact",
            &crate::common::test_name(module_path!(), "acknowledged_calls_survive_sigkill"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir)
        .env(CHILD_ROUND, round.to_string())
        .env(CHILD_SHARDS, shards.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("stdout");
    let (opened_sender, opened) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut compactions = 0;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line == "CHILD-OPEN" {
                let _ignored = opened_sender.send(());
            }
            if line == "CHILD-COMPACTED" {
                compactions += 1;
            }
            if let Some(rest) = line.strip_prefix("ACK ") {
                lines.push(rest.to_string());
            }
        }
        (lines, compactions)
    });
    if wait_for_open {
        let _opened = opened.recv_timeout(Duration::from_secs(30));
    }
    std::thread::sleep(kill_after);
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(!status.success(), "the child must die by the signal, not finish: {status:?}");
    reader.join().expect("reader")
}

fn apply(ledger: &mut HashMap<String, Acked>, line: &str) {
    let mut parts = line.split(' ');
    let (Some(kind), Some(key), Some(token)) = (parts.next(), parts.next(), parts.next()) else { return };
    let Ok(token) = token.parse() else { return };
    let state = match kind {
        "A" => Acked::Processing(token),
        "C" => Acked::Finished(State::Completed, token),
        "F" => Acked::Finished(State::Failed, token),
        "R" => Acked::Released(token),
        _ => return,
    };
    ledger.insert(key.to_string(), state);
}

fn check(dir: &Path, shards: u32, ledger: &HashMap<String, Acked>, seed: u64) {
    let store =
        Store::open(dir, config(shards)).unwrap_or_else(|error| panic!("seed {seed}: open after kill: {error}"));
    for (key, acked) in ledger {
        let record = store.get(b"", key.as_bytes()).expect("get");
        let found = record.as_ref().map(|record| (record.state, record.token));
        match acked {
            Acked::Processing(token) => match &record {
                Some(record) if record.token == *token => {
                    if record.state != State::Processing {
                        assert_eq!(record.response, response_for(key, *token), "seed {seed}: {key}");
                    }
                }
                // The release that followed reached the disk before the kill.
                None if action_of(key) == "release" => {}
                _ => panic!("seed {seed}: acknowledged claim of {key} ({token}) lost: found {found:?}"),
            },
            Acked::Finished(state, token) => {
                let record = record.unwrap_or_else(|| panic!("seed {seed}: finished {key} lost"));
                assert_eq!((record.state, record.token), (*state, *token), "seed {seed}: {key}");
                assert_eq!(record.response, response_for(key, *token), "seed {seed}: {key} response differs");
            }
            Acked::Released(token) => {
                if let Some(record) = &record {
                    assert!(record.token > *token, "seed {seed}: released {key} came back with token {}", record.token);
                }
            }
        }
    }
}

#[test]
fn acknowledged_calls_survive_sigkill() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        let round = std::env::var(CHILD_ROUND).ok().and_then(|round| round.parse().ok()).unwrap_or(0);
        let shards = std::env::var(CHILD_SHARDS).ok().and_then(|shards| shards.parse().ok()).unwrap_or(4);
        child(Path::new(&dir), round, shards);
    }
    let rounds: u64 = std::env::var("IDEMKV_KILL_ROUNDS").ok().and_then(|rounds| rounds.parse().ok()).unwrap_or(30);
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |elapsed| elapsed.as_secs() ^ u64::from(elapsed.subsec_nanos()) << 20)
        | 1;
    let mut random = Random(seed);
    let mut dir = tempfile::tempdir().expect("tempdir");
    let mut ledger = HashMap::new();
    let started = Instant::now();
    let mut acknowledged = 0;
    let mut compacting_rounds = 0;
    for round in 0..rounds {
        // A fresh directory every 15 rounds keeps a long soak linear in time.
        if round > 0 && round % ROUNDS_A_DIRECTORY == 0 {
            dir = tempfile::tempdir().expect("tempdir");
            ledger.clear();
        }
        // One round in five is killed early, often while it opens the store.
        let early = random.below(5) == 0;
        let kill_after =
            if early { Duration::from_millis(random.below(15)) } else { Duration::from_millis(5 + random.below(150)) };
        let shards = if (round / ROUNDS_A_DIRECTORY).is_multiple_of(2) { 4 } else { 1 };
        let child_started = Instant::now();
        let (lines, compactions) = run_child(dir.path(), round, shards, kill_after, !early);
        compacting_rounds += usize::from(compactions > 0);
        if std::env::var_os("IDEMKV_KILL_VERBOSE").is_some() {
            eprintln!(
                "round {round}: {} acks in {:?} (kill after {kill_after:?})",
                lines.len(),
                child_started.elapsed()
            );
        }
        acknowledged += lines.len();
        for line in &lines {
            apply(&mut ledger, line);
        }
        check(dir.path(), shards, &ledger, seed);
    }
    eprintln!(
        "{rounds} kills, {acknowledged} acknowledged calls, {compacting_rounds} rounds reclaimed space, seed {seed}, {:?}",
        started.elapsed()
    );
    assert!(acknowledged > 0, "no child ever acknowledged a call");
    assert!(rounds < 10 || compacting_rounds > 0, "no child ever completed a compaction");
}
