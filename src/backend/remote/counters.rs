//! The networked backends' counters, through the `metrics` facade under
//! the embedded store's names ([`crate::engine::telemetry`]), labelled
//! `backend` (`redis`, `postgres`) where the store's say `shard`: a
//! dashboard built on one works on the other. Nothing is recorded unless
//! the service installs a recorder, and nothing at all without the feature
//! `metrics`.
//!
//! What a fleet's counters cannot say the store's do: expiries happen on
//! the server (Redis's expiry, PostgreSQL's reaper), and a lease dropped
//! without a finish is not seen by a backend that hands out plain tokens.

use crate::backend::BackendClaim;
use crate::error::{BackendFailure, Error};
use std::time::Duration;

/// One backend's counters: its label.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counters {
    backend: &'static str,
}

/// A finishing or lease call, for its counter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Call {
    Complete,
    Fail,
    Release,
    Renew,
    Checkpoint,
}

impl Counters {
    pub(crate) fn new(backend: &'static str) -> Self {
        Counters { backend }
    }

    /// A claim's answer, once per call however long it waited, and its
    /// latency, the wait included.
    pub(crate) fn claimed(self, answer: &Result<BackendClaim, Error>, took: Duration) {
        let outcome = match answer {
            Ok(BackendClaim::Acquired { recovered: false, .. }) => "acquired",
            Ok(BackendClaim::Acquired { recovered: true, .. }) => "recovered",
            Ok(BackendClaim::Replay(_)) => "replay",
            Ok(BackendClaim::InProgress { .. }) => "in_progress",
            Ok(BackendClaim::Mismatch) => "mismatch",
            Err(Error::QuotaExceeded { .. }) => "quota_exceeded",
            Err(_) => "error",
        };
        self.count("idempo_claims_total");
        match outcome {
            "acquired" => self.count("idempo_acquired_total"),
            "recovered" => {
                self.count("idempo_acquired_total");
                self.count("idempo_recovered_total");
            }
            "replay" => self.duplicate("idempo_replay_total"),
            "in_progress" => self.duplicate("idempo_conflict_total"),
            "mismatch" => self.duplicate("idempo_mismatch_total"),
            _ => self.failed(answer.as_ref().err()),
        }
        if answer.is_ok() {
            self.seconds("idempo_claim_seconds", outcome, took);
        }
    }

    /// A waiting claim looked at its key again.
    pub(crate) fn looked_again(self) {
        self.count("idempo_wait_looks_total");
    }

    /// A finishing or lease call's answer.
    pub(crate) fn called(self, call: Call, answer: &Result<(), Error>) {
        match answer {
            Ok(()) => self.count(match call {
                Call::Complete => "idempo_completed_total",
                Call::Fail => "idempo_failed_total",
                Call::Release => "idempo_released_total",
                Call::Renew => "idempo_renewed_total",
                Call::Checkpoint => "idempo_checkpoints_total",
            }),
            Err(Error::LeaseLost { .. }) => self.count("idempo_lease_lost_total"),
            Err(error) => self.failed(Some(error)),
        }
    }

    /// A removal that removed a record.
    pub(crate) fn removed(self, answer: &Result<bool, Error>) {
        match answer {
            Ok(true) => self.count("idempo_removed_total"),
            Ok(false) => {}
            Err(error) => self.failed(Some(error)),
        }
    }

    /// A compare-and-set that replaced an answer.
    pub(crate) fn replaced(self, answer: &Result<bool, Error>) {
        match answer {
            Ok(true) => self.count("idempo_replaced_total"),
            Ok(false) => {}
            Err(error) => self.failed(Some(error)),
        }
    }

    fn duplicate(self, name: &'static str) {
        self.count(name);
        self.count("duplicate_detected_total");
    }

    /// A call the server did not answer as the contract does
    /// (`idempo_backend_errors_total`, by `failure`: `unavailable`,
    /// `refused`, `protocol`). Input refused before it was sent is not
    /// counted.
    fn failed(self, error: Option<&Error>) {
        if let Some(Error::Backend { failure, .. }) = error {
            let failure = match failure {
                BackendFailure::Unavailable => "unavailable",
                BackendFailure::Refused => "refused",
                _ => "protocol",
            };
            self.count_failure(failure);
        }
    }

    fn count_failure(self, failure: &'static str) {
        #[cfg(feature = "metrics")]
        metrics::counter!("idempo_backend_errors_total", "backend" => self.backend, "failure" => failure).increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = (self.backend, failure);
    }

    /// Counts one of `name`. The labels of the two backends are static
    /// (`metrics` then builds the key without a buffer): every call of a
    /// backend counts once or twice.
    fn count(self, name: &'static str) {
        #[cfg(feature = "metrics")]
        match self.backend {
            "redis" => metrics::counter!(name, "backend" => "redis").increment(1),
            "postgres" => metrics::counter!(name, "backend" => "postgres").increment(1),
            backend => metrics::counter!(name, "backend" => backend).increment(1),
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (self.backend, name);
    }

    fn seconds(self, name: &'static str, outcome: &'static str, took: Duration) {
        #[cfg(feature = "metrics")]
        metrics::histogram!(name, "backend" => self.backend, "outcome" => outcome).record(took.as_secs_f64());
        #[cfg(not(feature = "metrics"))]
        let _ = (self.backend, name, outcome, took);
    }
}
