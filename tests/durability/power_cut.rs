//! Power cuts, simulated from a seed: thousands of rounds of a random
//! workload (claim, complete, fail, release, renew, remove, compact) over a
//! few keys, on a store whose every byte goes through [`PowerCutStorage`].
//! Each round cuts the power up to three times: between two calls, inside
//! one (in the middle of an append, a roll, a compaction), or while the
//! store reopens after the previous cut. After each cut the store is
//! dropped, reopened and checked:
//!
//! 1. every acknowledged claim, completion and failure is there, with its
//!    exact token and response (unless a later acknowledged call removed or
//!    released it);
//! 2. nothing acknowledged as released or removed comes back;
//! 3. no fencing token is handed out twice: a token handed out after the
//!    reopen is greater than every durable token handed out before;
//! 4. the store opens: the simulator loses only what was never synced.
//!
//! Under [`Durability::Sync`] a call that returned `Ok` is acknowledged.
//! Under [`Durability::Interval`] only what a [`Store::sync`] covered is; a
//! call after it may or may not have reached the disk, as may the call that
//! failed when the power went (as in `tests/fault_sweep.rs`).
//!
//! Rounds have fixed seeds, so CI runs the same ones every time; a failure
//! names its round and seed, and `IDEMKV_POWER_CUT_SEED=<seed>` replays that
//! round alone, exactly. `IDEMKV_POWER_CUT_ROUNDS` runs more rounds (new
//! seeds), `IDEMKV_POWER_CUT_VERBOSE` prints every round and
//! `IDEMKV_POWER_CUT_TRACE` every call of every round (use it with a seed).
//!
//! What each call answers and leaves is the reference model's
//! (`idemkv::testing::Model`); the ledger keeps, per key, which of the
//! model's states must survive a cut and which may.

#![cfg(feature = "testing")]

use crate::common::START_MS;
use idemkv::io::{PowerCutStorage, Storage};
use idemkv::testing::{Expected, Model, ModelRecord};
use idemkv::{
    Claim, ClaimRequest, Clock, Config, Durability, Fingerprint, LeaseToken, ManualClock, Record, State, Store,
};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rounds run by default.
const ROUNDS: u64 = 6000;
/// A default run stops early past this, so that a slow machine stays in the
/// CI budget; rounds asked for by `IDEMKV_POWER_CUT_ROUNDS` all run.
const TIME_BUDGET: Duration = Duration::from_secs(40);
const KEYS: [&str; 4] = ["alpha", "bravo", "charlie", "delta"];
/// The TTL of every record (the rounds never reach it).
const TTL_MS: u64 = 3_600_000;
const TTL: Duration = Duration::from_millis(TTL_MS);
const CUTS_PER_ROUND_MAX: u64 = 3;
const STEPS_PER_CUT_MAX: u64 = 60;
/// Distinct reasons (messages without numbers and paths) shown per kind of
/// failure, each with its first example.
const REASONS_PER_KIND: usize = 8;

/// A tiny seeded generator (`SplitMix64`).
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut mixed = self.0;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        mixed ^ (mixed >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }

    fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn index(&mut self, bound: usize) -> usize {
        usize::try_from(self.below(bound as u64)).expect("below a usize")
    }
}

/// The seed of round `round`: fixed, so every run covers the same rounds.
fn round_seed(round: u64) -> u64 {
    Random(round ^ 0x1dea_c0de_5eed).next()
}

/// What a key may be on disk: the reference model's record (Processing
/// under any token when a claim failed as the power went and the model
/// does not know the token), or absent.
type Possible = Option<ModelRecord>;

/// Whether the store's `actual` record is what `expected` allows.
fn admits(expected: &Possible, actual: Option<&Record>) -> bool {
    match (expected, actual) {
        (None, None) => true,
        (Some(model), Some(record)) => model.agrees_with(record),
        _ => false,
    }
}

/// One key: what must survive a power cut, and what calls not known to be
/// durable may have left instead. What the store answers now is the
/// ledger's model.
#[derive(Debug, Clone, Default)]
struct KeyLedger {
    durable: Possible,
    maybe: Vec<Possible>,
}

/// The model of one round.
#[derive(Debug)]
struct Ledger {
    /// The reference model of every call that returned `Ok`: what the
    /// store answers now.
    model: Model,
    clock: ManualClock,
    keys: Vec<KeyLedger>,
    /// `Sync`: every call that returned is durable.
    sync: bool,
    /// The highest token a claim handed out.
    token_handed: u64,
    /// The highest token handed out since the last reopen: a sync makes
    /// it durable (a token handed out before a cut and lost with it may
    /// be handed out again under `Interval`, and is lower).
    token_handed_this_boot: u64,
    /// The highest token handed out by a claim known to be durable.
    token_durable: u64,
}

impl Ledger {
    fn new(config: &Config, clock: &ManualClock, sync: bool) -> Self {
        Ledger {
            model: Model::new(config),
            clock: clock.clone(),
            keys: vec![KeyLedger::default(); KEYS.len()],
            sync,
            token_handed: 0,
            token_handed_this_boot: 0,
            token_durable: 0,
        }
    }

    /// What the model holds for `key` now.
    fn current(&mut self, key: usize) -> Possible {
        self.model.get(b"", KEYS[key].as_bytes(), self.clock.now_ms()).cloned()
    }

    /// What `model` holds for `key` now.
    fn state_in(&self, model: &mut Model, key: usize) -> Possible {
        model.get(b"", KEYS[key].as_bytes(), self.clock.now_ms()).cloned()
    }

    /// A call on `key` returned `Ok`: `next` is the model with it applied.
    fn done(&mut self, key: usize, next: Model) {
        self.model = next;
        let state = self.current(key);
        let ledger = &mut self.keys[key];
        if self.sync {
            ledger.durable = state;
            ledger.maybe.clear();
        } else {
            ledger.maybe.push(state);
        }
    }

    /// A call on `key` failed as the power went; `next` is the model had it
    /// been carried out.
    fn failed(&mut self, key: usize, mut next: Model) {
        let state = self.state_in(&mut next, key);
        self.keys[key].maybe.push(state);
    }

    /// A `Store::sync` returned `Ok`: everything so far is durable.
    fn synced(&mut self) {
        for key in 0..KEYS.len() {
            let current = self.current(key);
            self.keys[key] = KeyLedger { durable: current, maybe: Vec::new() };
        }
        self.token_durable = self.token_durable.max(self.token_handed_this_boot);
    }

    /// The store was reopened after a cut.
    fn rebooted(&mut self) {
        self.token_handed_this_boot = 0;
    }

    /// A claim handed out `token`: it must be above every durable token
    /// handed out before. Returns whether it reissues a token of a claim
    /// that was not durable (possible under `Interval` only).
    fn handed(&mut self, token: u64) -> Result<bool, Failure> {
        if token <= self.token_durable {
            return Err(Failure::new(
                Broke::TokenReused,
                format!("token {token} handed out, but {} was handed out and durable before", self.token_durable),
            ));
        }
        let reissued = token <= self.token_handed;
        self.token_handed = self.token_handed.max(token);
        self.token_handed_this_boot = self.token_handed_this_boot.max(token);
        if self.sync {
            self.token_durable = self.token_durable.max(token);
        }
        Ok(reissued)
    }
}

/// What broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Broke {
    /// `Store::open` refused the directory after a cut.
    OpenRefused,
    /// An acknowledged record is missing or differs after the reopen.
    RecordLost,
    /// A key acknowledged as released or removed is back.
    CameBack,
    /// A fencing token was handed out twice.
    TokenReused,
    /// The store answered what the model says it cannot.
    WrongAnswer,
    /// A call failed with the power on.
    CallFailed,
}

#[derive(Debug)]
struct Failure {
    broke: Broke,
    detail: String,
}

impl Failure {
    fn new(broke: Broke, detail: String) -> Self {
        Failure { broke, detail }
    }
}

/// Distinct reasons of one kind of failure: each with its count and first
/// message.
type Reasons = BTreeMap<String, (u64, String)>;

/// Counts over every round.
#[derive(Debug, Default)]
struct Totals {
    rounds: u64,
    cuts: u64,
    cuts_inside_a_call: u64,
    cuts_during_open: u64,
    acknowledged_calls: u64,
    torn_tail_bytes_cut: u64,
    interval_tokens_reissued: u64,
    files_torn: u64,
    files_vanished: u64,
    /// Per kind of failure: rounds, and per reason its count and first
    /// example.
    failures: BTreeMap<Broke, (u64, Reasons)>,
    failing_seeds: Vec<u64>,
}

impl Totals {
    fn count(&self, broke: Broke) -> u64 {
        self.failures.get(&broke).map_or(0, |(count, _)| *count)
    }

    fn record(&mut self, failure: &Failure, dir: &Path, message: String) {
        let (count, reasons) = self.failures.entry(failure.broke).or_default();
        *count += 1;
        let reason: String = failure
            .detail
            .replace(&*dir.to_string_lossy(), "DIR")
            .chars()
            .map(|char| if char.is_ascii_digit() { '#' } else { char })
            .collect();
        let reason = reason.split("##").collect::<String>();
        let known = reasons.len();
        match reasons.get_mut(&reason) {
            Some((seen, _)) => *seen += 1,
            None if known < REASONS_PER_KIND => {
                reasons.insert(reason, (1, message));
            }
            None => {}
        }
    }
}

/// How a workload ended.
enum Ended {
    /// All its steps ran; the power is on.
    Done,
    /// The power failed during a call.
    PowerOff,
}

/// One round: a disk, a clock, a store configuration and the model.
struct Round<'a> {
    dir: &'a Path,
    random: Random,
    storage: PowerCutStorage,
    clock: ManualClock,
    ledger: Ledger,
    segment_bytes: u64,
    totals: &'a mut Totals,
    /// Steps run, for messages.
    step: u64,
    /// Print every call (`IDEMKV_POWER_CUT_TRACE`).
    trace: bool,
}

impl Round<'_> {
    fn config(&self) -> Config {
        let durability =
            if self.ledger.sync { Durability::Sync } else { Durability::Interval(Duration::from_secs(3600)) };
        Config::new()
            .shards(1)
            .durability(durability)
            .segment_bytes(self.segment_bytes)
            .response_bytes_max(1024)
            .default_ttl(TTL)
            .compaction_interval(None)
            .compaction_bytes_per_second(0)
            .clock(Arc::new(self.clock.clone()))
            .storage(Arc::new(self.storage.clone()))
    }

    fn run(&mut self) -> Result<(), Failure> {
        let mut store = self.open()?;
        for _ in 0..=self.random.below(CUTS_PER_ROUND_MAX) {
            if self.random.percent(50) {
                let calls = self.random.below(4 * STEPS_PER_CUT_MAX);
                self.trace(format_args!("power off after {calls} more storage calls"));
                self.storage.power_off_after(calls);
            }
            let steps = self.random.below(STEPS_PER_CUT_MAX + 1);
            if let Ended::PowerOff = self.workload(&store, steps)? {
                self.totals.cuts_inside_a_call += 1;
            }
            self.cut();
            drop(store);
            store = self.open()?;
            self.ledger.rebooted();
            let torn = store.stats().torn_tail_bytes_cut;
            self.trace(format_args!("reopened, {torn} torn-tail bytes cut"));
            self.totals.torn_tail_bytes_cut += torn;
            self.verify(&store)?;
        }
        Ok(())
    }

    fn trace(&self, what: fmt::Arguments<'_>) {
        if self.trace {
            eprintln!("  step {}: {what}", self.step);
        }
    }

    fn cut(&mut self) {
        let seed = self.random.next();
        let report = self.storage.power_cut(seed);
        self.trace(format_args!("power cut (seed {seed}): {report:?}"));
        self.totals.cuts += 1;
        self.totals.files_torn += report.files_torn;
        self.totals.files_vanished += report.files_vanished;
    }

    /// Opens the store (the first time, or after a cut); one time in four
    /// the power fails again while it opens, and it is cut and opened once
    /// more.
    fn open(&mut self) -> Result<Store, Failure> {
        if self.random.percent(25) {
            let calls = self.random.below(16);
            self.storage.power_off_after(calls);
            let opened = Store::open(self.dir, self.config());
            if self.storage.powered_off() {
                self.trace(format_args!(
                    "the power failed during an open, after {calls} storage calls: {:?}",
                    opened.as_ref().err()
                ));
                drop(opened);
                self.totals.cuts_during_open += 1;
                self.cut();
            } else {
                self.storage.cancel_power_off();
                return opened.map_err(|error| Failure::new(Broke::OpenRefused, error.to_string()));
            }
        }
        Store::open(self.dir, self.config()).map_err(|error| Failure::new(Broke::OpenRefused, error.to_string()))
    }

    /// Runs `steps` random calls, or fewer if the power fails.
    fn workload(&mut self, store: &Store, steps: u64) -> Result<Ended, Failure> {
        for _ in 0..steps {
            self.step += 1;
            self.clock.advance(Duration::from_millis(1));
            let outcome = if !self.ledger.sync && self.random.percent(12) {
                let synced = store.sync();
                self.trace(format_args!("sync: {synced:?}"));
                synced.map(|()| self.ledger.synced())
            } else if self.random.percent(4) {
                let compacted = store.compact();
                self.trace(format_args!("compact: {compacted:?}"));
                compacted.map(|_| ())
            } else {
                self.key_step(store)?;
                Ok(())
            };
            if let Err(error) = outcome {
                self.call_failed("sync or compact", &error)?;
            }
            if self.storage.powered_off() {
                return Ok(Ended::PowerOff);
            }
        }
        Ok(Ended::Done)
    }

    /// A call failed: with the power off that is expected, otherwise it is
    /// a failure of its own.
    fn call_failed(&self, call: &str, error: &idemkv::Error) -> Result<(), Failure> {
        if self.storage.powered_off() {
            Ok(())
        } else {
            Err(Failure::new(Broke::CallFailed, format!("{call} failed with the power on: {error}")))
        }
    }

    /// One call on a random key, chosen by the key's current state.
    fn key_step(&mut self, store: &Store) -> Result<(), Failure> {
        let key = self.random.index(KEYS.len());
        match self.ledger.current(key) {
            None => self.claim_new(store, key),
            Some(record) if record.state == State::Processing => {
                self.finish(store, key, record.token.expect("the current state always has its token"))
            }
            Some(expected) => {
                if self.random.percent(30) {
                    self.remove(store, key)
                } else {
                    match store.claim(&request(key)) {
                        Ok(Claim::Replay(record)) if expected.agrees_with(&record) => Ok(()),
                        Ok(other) => Err(wrong(key, "claim", &other, &Some(expected))),
                        Err(error) => self.call_failed("replay claim", &error),
                    }
                }
            }
        }
    }

    fn claim_new(&mut self, store: &Store, key: usize) -> Result<(), Failure> {
        let mut next = self.ledger.model.clone();
        let expected = next.claim(&request(key), self.clock.now_ms());
        assert!(matches!(expected, Ok(Expected::Acquired { .. })), "the model: {expected:?}");
        match store.claim(&request(key)) {
            Ok(Claim::Acquired(lease)) => {
                let token = lease.into_token().token;
                if self.ledger.handed(token)? {
                    self.totals.interval_tokens_reissued += 1;
                }
                // Under `Interval` a token lost with a cut may be handed out
                // again: the ledger's `handed` judges tokens, not the model.
                let _grew = next.grant(b"", KEYS[key].as_bytes(), token);
                self.acknowledged(key, next);
                Ok(())
            }
            Ok(other) => Err(wrong(key, "claim", &other, &None)),
            Err(error) => {
                self.trace(format_args!("{}: claim failed: {error}", KEYS[key]));
                self.ledger.failed(key, next);
                self.call_failed("claim", &error)
            }
        }
    }

    /// Completes, fails, releases, renews or removes a held key, or claims
    /// it again (in progress).
    fn finish(&mut self, store: &Store, key: usize, token: u64) -> Result<(), Failure> {
        let lease = LeaseToken {
            keyspace: idemkv::Keyspace::Caller,
            scope: Vec::new(),
            key: KEYS[key].as_bytes().to_vec(),
            token,
        };
        let response = response(key, token, self.step, &mut self.random);
        let (now, mut next) = (self.clock.now_ms(), self.ledger.model.clone());
        let (call, predicted, outcome) = match self.random.below(100) {
            0..30 => ("complete", next.complete(&lease, &response, now), store.complete(&lease, &response)),
            30..45 => ("fail", next.fail(&lease, &response, now), store.fail(&lease, &response)),
            45..60 => ("release", next.release(&lease, now), store.release(&lease)),
            60..75 => {
                let extend = Duration::from_secs(60);
                ("renew", next.renew(&lease, extend, now).map(|_| ()), store.renew(&lease, extend).map(|_| ()))
            }
            75..85 => return self.remove(store, key),
            _ => {
                return match store.claim(&request(key)) {
                    Ok(Claim::InProgress { .. }) => Ok(()),
                    Ok(other) => Err(wrong(key, "claim", &other, &self.ledger.current(key))),
                    Err(error) => self.call_failed("in-progress claim", &error),
                };
            }
        };
        assert_eq!(predicted, Ok(()), "the model: the current holder holds");
        match outcome {
            Ok(()) => {
                self.acknowledged(key, next);
                Ok(())
            }
            Err(error) => {
                self.trace(format_args!("{}: {call} failed: {error}", KEYS[key]));
                self.ledger.failed(key, next);
                self.call_failed(call, &error)
            }
        }
    }

    fn remove(&mut self, store: &Store, key: usize) -> Result<(), Failure> {
        let mut next = self.ledger.model.clone();
        assert!(next.remove(b"", KEYS[key].as_bytes(), self.clock.now_ms()), "the model holds {}", KEYS[key]);
        match store.remove(b"", KEYS[key].as_bytes()) {
            Ok(true) => {
                self.acknowledged(key, next);
                Ok(())
            }
            Ok(false) => Err(Failure::new(Broke::WrongAnswer, format!("{}: remove found nothing", KEYS[key]))),
            Err(error) => {
                self.trace(format_args!("{}: remove failed: {error}", KEYS[key]));
                self.ledger.failed(key, next);
                self.call_failed("remove", &error)
            }
        }
    }

    /// A call on `key` returned `Ok`; `next` is the model with it applied.
    fn acknowledged(&mut self, key: usize, next: Model) {
        self.totals.acknowledged_calls += 1;
        self.ledger.done(key, next);
        let state = self.ledger.current(key);
        self.trace(format_args!("{}: Ok, now {}", KEYS[key], brief(&state)));
    }

    /// Every key as the model allows after a cut; the model then takes what
    /// the store holds.
    fn verify(&mut self, store: &Store) -> Result<(), Failure> {
        for (key, name) in KEYS.iter().enumerate() {
            let actual = match store.get(b"", name.as_bytes()) {
                Ok(record) => record,
                Err(error) => {
                    return Err(Failure::new(Broke::CallFailed, format!("{name}: get after reopen: {error}")))
                }
            };
            let ledger = &self.ledger.keys[key];
            let allowed =
                std::iter::once(&ledger.durable).chain(&ledger.maybe).any(|state| admits(state, actual.as_ref()));
            let found = actual.as_ref().map(|record| ModelRecord::from_record(record, TTL_MS));
            if !allowed {
                let broke = if ledger.durable.is_none() { Broke::CameBack } else { Broke::RecordLost };
                let detail = format!(
                    "{name}: acknowledged {:?}{}, found {:?} after the reopen",
                    brief(&ledger.durable),
                    if ledger.maybe.is_empty() {
                        String::new()
                    } else {
                        format!(" (or {:?})", ledger.maybe.iter().map(brief).collect::<Vec<_>>())
                    },
                    brief(&found),
                );
                return Err(Failure::new(broke, detail));
            }
            self.trace(format_args!("{name}: found {}", brief(&found)));
            self.ledger.model.set(b"", name.as_bytes(), found.clone());
            self.ledger.keys[key] = KeyLedger { durable: found, maybe: Vec::new() };
        }
        Ok(())
    }
}

fn request(key: usize) -> ClaimRequest<'static> {
    ClaimRequest::new(KEYS[key], Fingerprint::of(KEYS[key].as_bytes()))
}

/// A response of 0..900 bytes that names its key and token.
fn response(key: usize, token: u64, step: u64, random: &mut Random) -> Vec<u8> {
    let mut response = format!("{}/{token}/{step}/", KEYS[key]).into_bytes();
    let len = usize::try_from(random.below(900)).expect("small");
    response.resize(len, b'a' + u8::try_from(token % 26).expect("below 26"));
    response
}

/// A state for a message: responses by length only.
fn brief(state: &Possible) -> String {
    match state {
        None => "Absent".to_string(),
        Some(record) => {
            let token = record.token.map_or("any".to_string(), |token| token.to_string());
            match record.state {
                State::Processing => format!("Processing({token})"),
                finished => format!("{finished:?}({token}, {} bytes)", record.response.len()),
            }
        }
    }
}

fn wrong(key: usize, call: &str, answer: &Claim, expected: &Possible) -> Failure {
    Failure::new(
        Broke::WrongAnswer,
        format!("{}: {call} answered {answer:?}, the model has {}", KEYS[key], brief(expected)),
    )
}

/// A disk where `dir` and its parents exist durably, as an installer would
/// leave it before the store's first open.
fn fresh_disk(dir: &Path) -> PowerCutStorage {
    let storage = PowerCutStorage::new();
    storage.create_dir_all(dir).expect("mkdir");
    for parent in dir.ancestors().skip(1) {
        storage.sync_dir(parent).expect("sync parent");
    }
    storage
}

fn run_round(dir: &Path, round: u64, seed: u64, totals: &mut Totals) {
    let mut random = Random(seed);
    let sync = random.percent(70);
    let segment_bytes = 4096 + random.below(12 * 1024 + 1);
    let clock = ManualClock::new(START_MS);
    let mut state = Round {
        dir,
        random,
        storage: fresh_disk(dir),
        clock: clock.clone(),
        ledger: Ledger::new(&Config::new(), &clock, sync),
        segment_bytes,
        totals,
        step: 0,
        trace: std::env::var_os("IDEMKV_POWER_CUT_TRACE").is_some(),
    };
    // The model knows the round's limits, lease and TTL from its config.
    state.ledger.model = Model::new(&state.config());
    let outcome = state.run();
    let step = state.step;
    totals.rounds += 1;
    let mode = if sync { "Sync" } else { "Interval" };
    if let Err(failure) = outcome {
        let message = format!(
            "round {round}, seed {seed} ({mode}, segment_bytes {segment_bytes}, step {step}): {:?}: {} \
             — replay with IDEMKV_POWER_CUT_SEED={seed}",
            failure.broke, failure.detail
        );
        if std::env::var_os("IDEMKV_POWER_CUT_VERBOSE").is_some() {
            eprintln!("{message}");
        }
        totals.record(&failure, dir, message);
        totals.failing_seeds.push(seed);
    } else if std::env::var_os("IDEMKV_POWER_CUT_VERBOSE").is_some() {
        eprintln!("round {round}, seed {seed} ({mode}): ok after {step} steps");
    }
}

fn summary(totals: &Totals, elapsed: Duration) -> String {
    let mut text = format!(
        "power cut: {} rounds, {} cuts ({} inside a call, {} during an open), {} acknowledged calls; \
         {} opens refused, {} acknowledged records lost, {} released or removed came back, {} tokens reused, \
         {} wrong answers, {} calls failed with the power on; {} torn-tail bytes cut; \
         simulator: {} files torn, {} files vanished; {} tokens reissued after an unsynced Interval claim \
         was lost (allowed); {elapsed:.1?}",
        totals.rounds,
        totals.cuts,
        totals.cuts_inside_a_call,
        totals.cuts_during_open,
        totals.acknowledged_calls,
        totals.count(Broke::OpenRefused),
        totals.count(Broke::RecordLost),
        totals.count(Broke::CameBack),
        totals.count(Broke::TokenReused),
        totals.count(Broke::WrongAnswer),
        totals.count(Broke::CallFailed),
        totals.torn_tail_bytes_cut,
        totals.files_torn,
        totals.files_vanished,
        totals.interval_tokens_reissued,
    );
    for (broke, (count, reasons)) in &totals.failures {
        let _ = write!(text, "\n{broke:?}: {count} rounds; by reason, with the first example:");
        for (seen, example) in reasons.values() {
            let _ = write!(text, "\n  {seen} × {example}");
        }
    }
    if !totals.failing_seeds.is_empty() {
        let shown: Vec<String> = totals.failing_seeds.iter().take(20).map(u64::to_string).collect();
        let _ = write!(text, "\nfailing seeds ({} rounds): {}", totals.failing_seeds.len(), shown.join(" "));
    }
    text
}

#[test]
fn acknowledged_records_survive_every_power_cut() {
    let lock_dir = tempfile::tempdir().expect("tempdir");
    // The store's lock file lives on the real file system; its data only in
    // the simulator, under the same path.
    let dir = lock_dir.path();
    let mut totals = Totals::default();
    let started = Instant::now();
    if let Some(seed) = std::env::var("IDEMKV_POWER_CUT_SEED").ok().and_then(|seed| seed.parse().ok()) {
        run_round(dir, 0, seed, &mut totals);
    } else {
        let asked: Option<u64> = std::env::var("IDEMKV_POWER_CUT_ROUNDS").ok().and_then(|rounds| rounds.parse().ok());
        for round in 0..asked.unwrap_or(ROUNDS) {
            if asked.is_none() && started.elapsed() > TIME_BUDGET {
                eprintln!("power cut: time budget spent after {round} rounds");
                break;
            }
            run_round(dir, round, round_seed(round), &mut totals);
        }
    }
    let summary = summary(&totals, started.elapsed());
    assert!(totals.failures.is_empty(), "{summary}");
    eprintln!("{summary}");
    assert!(totals.cuts_inside_a_call > 0 || totals.rounds < 50, "no cut ever landed inside a call");
}
