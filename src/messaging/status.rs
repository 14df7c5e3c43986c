//! Where each key's staged messages stand ([`outbox_status`], what
//! `idemkv outbox` shows), and an operator's re-drive or give-up of a key
//! stopped at a dead message: read and written through the relay's
//! progress records (see [`Relay`](super::Relay)).

use super::envelope::{messages_of, Staged};
use super::relay::{compact, progress, read_progress, DEAD, DONE, RETRY};
use crate::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
use crate::error::Result;
use crate::{Fingerprint, Keyspace, State};
use std::time::Duration;

/// Where one key's staged messages stand, as [`outbox_status`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyState {
    /// Not all delivered yet: the message `next` is the next to go (after
    /// `attempts` refusals, the last with `error`).
    Pending {
        /// The message to deliver next.
        next: usize,
        /// Its refusals so far.
        attempts: u32,
        /// The last refusal's error, if any.
        error: String,
    },
    /// A relay is delivering it now (or died doing so, until its lease
    /// ends).
    InFlight,
    /// Stopped at the dead message `index`; the ones after it wait.
    Dead {
        /// The dead message.
        index: usize,
        /// Its attempts.
        attempts: u32,
        /// The last error.
        error: String,
    },
    /// Every message delivered (or given up), by a relay that stopped
    /// before it dropped them from the completion; its next pass does.
    Delivered,
}

/// One key with staged messages, and where they stand.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyStatus {
    /// The key.
    pub key: Vec<u8>,
    /// Its staged messages.
    pub messages: Vec<Staged>,
    /// Where they stand.
    pub state: KeyState,
}

/// A page of the keys of `scope` with staged messages (in key order,
/// after `after`, at most `limit`; read through
/// [`IdempotencyBackend::scan_staged`], so the scope's other records are
/// not read), and where each stands: what `idemkv outbox` shows.
///
/// # Errors
/// The backend's errors.
pub async fn outbox_status<B: IdempotencyBackend>(
    backend: &B,
    scope: &[u8],
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<KeyStatus>> {
    let mut statuses = Vec::new();
    let mut after = after.map(<[u8]>::to_vec);
    while statuses.len() < limit {
        let page = backend.scan_staged(scope, after.as_deref(), 256).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.key.clone());
        for record in page.iter().filter(|record| record.state == State::Completed) {
            let Ok(messages) = messages_of(&record.response) else { continue };
            if messages.is_empty() || statuses.len() == limit {
                continue;
            }
            let first = Fingerprint::of(messages[0].id.as_bytes());
            let progress = backend.get_in(Keyspace::Relay, scope, &record.key).await?;
            // A progress record of an earlier completion of the key is not
            // this one's.
            let state = match progress.filter(|found| found.fingerprint == first) {
                None => KeyState::Pending { next: 0, attempts: 0, error: String::new() },
                Some(found) if found.state == State::Processing => KeyState::InFlight,
                Some(found) => {
                    let error = String::from_utf8_lossy(found.response.get(9..).unwrap_or_default()).into_owned();
                    match read_progress(&found.response) {
                        Some((DONE, _, _)) => KeyState::Delivered,
                        Some((DEAD, index, attempts)) => KeyState::Dead { index, attempts, error },
                        Some((_, next, attempts)) => KeyState::Pending { next, attempts, error },
                        None => KeyState::Pending { next: 0, attempts: 0, error },
                    }
                }
            };
            statuses.push(KeyStatus { key: record.key.clone(), messages, state });
        }
    }
    Ok(statuses)
}

/// Re-drives the key `(scope, key)` stopped at a dead message: the next
/// relay pass delivers from that message, with its attempts counted anew.
/// False when the key is not stopped at a dead message.
///
/// # Errors
/// The backend's errors.
pub async fn retry_dead_key<B: IdempotencyBackend>(backend: &B, scope: &[u8], key: &[u8]) -> Result<bool> {
    rewrite_dead(backend, scope, key, false).await
}

/// Gives up on the rest of a key stopped at a dead message: its messages
/// from the dead one on are never delivered. False when the key is not
/// stopped at a dead message.
///
/// # Errors
/// The backend's errors.
pub async fn drop_dead_key<B: IdempotencyBackend>(backend: &B, scope: &[u8], key: &[u8]) -> Result<bool> {
    rewrite_dead(backend, scope, key, true).await
}

async fn rewrite_dead<B: IdempotencyBackend>(backend: &B, scope: &[u8], key: &[u8], give_up: bool) -> Result<bool> {
    let Some(found) = backend.get_in(Keyspace::Relay, scope, key).await? else { return Ok(false) };
    let Some((DEAD, index, _)) = read_progress(&found.response) else { return Ok(false) };
    let Some(owner) = backend.get(scope, key).await? else { return Ok(false) };
    let Some(first) = messages_of(&owner.response).ok().and_then(|messages| messages.into_iter().next()) else {
        return Ok(false);
    };
    if found.fingerprint != Fingerprint::of(first.id.as_bytes()) {
        return Ok(false); // an earlier completion's
    }
    if give_up {
        // One compare-and-set: dead becomes done; then the completion
        // drops its messages.
        let done = progress(DONE, index, 0, "dropped by an operator");
        if !backend.replace_in(Keyspace::Relay, scope, key, &found.response, &done).await? {
            return Ok(false);
        }
        compact(backend, &owner).await?;
        return Ok(true);
    }
    // The dead record goes, and a failed one that says what comes next
    // takes its place (a relay's claim runs a failed key again); a crash
    // between leaves none, and the next pass delivers from the first
    // message (again: at least once).
    backend.remove_in(Keyspace::Relay, scope, key).await?;
    let options = ClaimOptions::new().ttl(Duration::from_secs(7 * 24 * 3600));
    let BackendClaim::Acquired { token, .. } =
        backend.claim_in(Keyspace::Relay, scope, key, Fingerprint::of(first.id.as_bytes()), options).await?
    else {
        return Ok(false);
    };
    backend.fail(&token, &progress(RETRY, index, 0, "re-driven by an operator")).await?;
    Ok(true)
}
