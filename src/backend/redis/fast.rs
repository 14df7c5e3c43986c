//! The claim's fast path: a fresh key claimed with bare commands, no
//! script, and the common answers about a key that is there read from
//! the same round trip.
//!
//! A script costs the server about 20 µs a call against 3 µs for a bare
//! `SET`, and a claim is one of the two calls of every request. So a claim
//! first sends, as one transaction (`MULTI` … `EXEC`, one slot: every name
//! is in the record's slot):
//!
//! - `SET record fresh NX GET PX px`: writes `fresh` (a Processing record,
//!   see [`fresh`]) when the key is absent, else answers what is there and
//!   writes nothing;
//! - `PEXPIRETIME record`: the key's expiry, in the server's ms;
//! - `TIME`: the server's time;
//! - `ZADD keys 0 key`: the key in its scope's index ([`super::index`];
//!   on a Cluster its bucket's, in the record's slot) in the same step as
//!   its record (a key there already stays as it is). Its bound in the index of ends is written
//!   by the script that finishes the key (or takes it over).
//!
//! When the key was absent the claim is acquired, with attempt 1 and the
//! token the scripts give such a record ([`token`]). When it was there,
//! [`decide`] answers as the claim script would for the answers that
//! write nothing (a replay, a mismatch, in progress, a hash collision)
//! and leaves every other case to the script (a record past its life, a
//! lease to take over, a Failed key run again, a waiter to mark): the
//! transaction wrote nothing then, so the script starts from the same
//! record. A record this module cannot read goes to the script too.
//!
//! The path needs `SET … NX GET` and `PEXPIRETIME` (Redis 7.0); on an
//! older server, or one that does not say its version, every claim is the
//! script.
//!
//! A backend that waits for replicas does not take this path (a fresh
//! key's `SET` would be a write with no `WAIT` behind it on its
//! connection); it first reads the record with no write at all
//! ([`peek`]: `GET`, `PTTL`, `TIME`, on any version) and answers by
//! [`decide`] when it can, so that a replay, a mismatch or a key in
//! progress waits for no replica; every other claim is the script, with
//! its `WAIT`.

use super::connection::Connection;
use super::reply::protocol;
use super::Names;
use crate::backend::remote::ClaimArgs;
use crate::backend::BackendClaim;
use crate::error::{Error, Result};
use crate::{LeaseToken, ReusePolicy};
use std::time::Duration;

/// Claims `args` on `record` by the fast path (`keep_ms` as the
/// backend's [`token_keep`](super::RedisBackend::token_keep)): the
/// answer, or `None` when the claim script must decide.
pub(super) async fn claim(
    connection: &Connection,
    names: &Names,
    args: &ClaimArgs<'_>,
    keep_ms: u64,
    waiting: bool,
) -> Result<Option<BackendClaim>> {
    let px = args.lease_ms.saturating_add(args.ttl_ms).saturating_add(keep_ms);
    let Some(fresh) = fresh(args, px) else {
        return Ok(None);
    };
    let filed = names.index.as_ref().map(|index| (&index.keys[..], args.key));
    match connection.claim_fast(&names.record, (&fresh, px), filed).await? {
        (None, expiry, _) => {
            let token = token(expiry, px).ok_or_else(|| protocol("claim: expiry before the write"))?;
            Ok(Some(BackendClaim::Acquired {
                token: LeaseToken {
                    keyspace: args.keyspace,
                    scope: args.scope.to_vec(),
                    key: args.key.to_vec(),
                    token,
                },
                attempt: 1,
                recovered: false,
                checkpoint: None,
            }))
        }
        (Some(found), expiry, now) => decide(&found, expiry, now, args, waiting).transpose(),
    }
}

/// The claim's answer when it writes nothing (a replay, a mismatch, in
/// progress, a hash collision), read with no write at all (see
/// [`Connection::peek`]); `None` when the claim must write (the key is
/// absent, a lease to take over, a Failed key run again, a waiter to
/// mark) or the record is not as expected. A backend that waits for
/// replicas asks this first, so that such a claim waits for nothing.
pub(super) async fn peek(
    connection: &Connection,
    names: &Names,
    args: &ClaimArgs<'_>,
    waiting: bool,
) -> Result<Option<BackendClaim>> {
    match connection.peek(&names.record).await? {
        (None, _, _) => Ok(None),
        (Some(found), expiry, now) => decide(&found, expiry, now, args, waiting).transpose(),
    }
}

/// Field 8 of a record a fast claim wrote, read only by the scripts of an
/// earlier build, which do not settle it: a lease end (ms) beyond any
/// clock, so that they answer in progress and never take it over. 2^52:
/// exact in Lua's doubles.
pub(super) const FAR: u64 = 1 << 52;

/// The record a fast claim writes (the scripts' layout, fields 1–16): `P`,
/// the fingerprint, attempt 1, not recovered, token, created and updated
/// 0 (the key's expiry gives them), [`FAR`] where a settled record has its
/// lease end, the TTL, scope, key, no response, no checkpoint, no waiter,
/// `px`, the `PX` it is written with, and the lease.
fn fresh(args: &ClaimArgs<'_>, px: u64) -> Option<Vec<u8>> {
    fn text(value: &mut Vec<u8>, bytes: &[u8]) -> Option<()> {
        rmp::encode::write_str_len(value, u32::try_from(bytes.len()).ok()?).ok()?;
        value.extend_from_slice(bytes);
        Some(())
    }
    let mut value = Vec::with_capacity(96 + args.scope.len() + args.key.len());
    rmp::encode::write_array_len(&mut value, 16).ok()?;
    text(&mut value, b"P")?;
    text(&mut value, &args.fingerprint.as_bytes()[..])?;
    for number in [1, 0, 0, 0, 0, FAR, args.ttl_ms] {
        rmp::encode::write_uint(&mut value, number).ok()?;
    }
    for bytes in [args.scope, args.key, b"", b""] {
        text(&mut value, bytes)?;
    }
    for number in [0, px, args.lease_ms] {
        rmp::encode::write_uint(&mut value, number).ok()?;
    }
    Some(value)
}

/// The token of a record a fast claim wrote with `PX px`, whose key
/// expires at `expiry` ms: the server's time of the write in µs (ms
/// precision), as every script settles it.
fn token(expiry: i64, px: u64) -> Option<u64> {
    let at = u64::try_from(expiry).ok()?.checked_sub(px)?;
    at.checked_mul(1000)
}

/// What the claim script needs of a stored record to answer without
/// writing.
struct Stored<'a> {
    state: &'a [u8],
    fingerprint: &'a [u8],
    /// Lease end (Processing) or expiry (finished), in ms.
    deadline: i64,
    ttl: i64,
    scope: &'a [u8],
    key: &'a [u8],
    response: &'a [u8],
    waited: bool,
}

/// Reads `packed` as the scripts wrote it, settling a record of the fast
/// path by the key's `expiry`; `None` when it is not as expected.
fn read(mut packed: &[u8], expiry: i64) -> Option<Stored<'_>> {
    fn text<'a>(input: &mut &'a [u8]) -> Option<&'a [u8]> {
        let length = usize::try_from(rmp::decode::read_str_len(input).ok()?).ok()?;
        let (text, rest) = (input.get(..length)?, input.get(length..)?);
        *input = rest;
        Some(text)
    }
    fn number(input: &mut &[u8]) -> Option<i64> {
        rmp::decode::read_int(input).ok()
    }
    let input = &mut packed;
    let fields = rmp::decode::read_array_len(input).ok()?;
    if !(13..=16).contains(&fields) {
        return None;
    }
    let state = text(input)?;
    let fingerprint = text(input)?;
    let _attempt = number(input)?;
    let _recovered = number(input)?;
    let _token = number(input)?;
    let _created = number(input)?;
    let _updated = number(input)?;
    let mut deadline = number(input)?;
    let ttl = number(input)?;
    let scope = text(input)?;
    let key = text(input)?;
    let response = text(input)?;
    let _checkpoint = text(input)?;
    let waited = if fields >= 14 { number(input)? == 1 } else { false };
    match fields {
        // Written by the fast path: its `PX` and lease give the lease end.
        16 => {
            let (px, lease) = (number(input)?, number(input)?);
            deadline = expiry.checked_sub(px)?.checked_add(lease)?;
        }
        15 => return None,
        _ => {}
    }
    input.is_empty().then_some(Stored { state, fingerprint, deadline, ttl, scope, key, response, waited })
}

/// The claim script's answer for the record `packed` found at `now` ms,
/// when that answer writes nothing; `None` when the script must run.
fn decide(packed: &[u8], expiry: i64, now: i64, args: &ClaimArgs<'_>, waiting: bool) -> Option<Result<BackendClaim>> {
    let stored = read(packed, expiry)?;
    if stored.scope != args.scope || stored.key != args.key {
        return Some(Err(Error::KeyHashCollision));
    }
    let live = match stored.state {
        b"P" => stored.deadline.checked_add(stored.ttl)? > now,
        b"C" | b"F" => stored.deadline > now,
        _ => false,
    };
    if !live {
        return None;
    }
    if stored.fingerprint != args.fingerprint.as_bytes() {
        return Some(Ok(BackendClaim::Mismatch));
    }
    match stored.state {
        b"F" if args.reuse == ReusePolicy::RetryFailed => None,
        b"C" | b"F" => Some(Ok(BackendClaim::Replay(stored.response.to_vec()))),
        _ if stored.deadline > now && (stored.waited || !waiting) => {
            let left = u64::try_from(stored.deadline - now).ok()?;
            Some(Ok(BackendClaim::InProgress { retry_after: Duration::from_millis(left) }))
        }
        // A lease to take over, or a waiter to mark.
        _ => None,
    }
}
