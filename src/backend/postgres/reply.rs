//! Reading the server's answers: the client's and the pool's errors as the
//! contract's, rows as answers and records. Nothing is guessed: an answer
//! the contract does not know is [`BackendFailure::Protocol`].

use crate::backend::remote::Address;
use crate::backend::BackendClaim;
use crate::error::{BackendFailure, Error, Result};
use crate::record::{Record, State};
use crate::{Checkpoint, Fingerprint, LeaseToken};
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::Row;

fn backend(failure: BackendFailure, source: Box<dyn std::error::Error + Send + Sync>) -> Error {
    Error::Backend { backend: "postgres", failure, source }
}

/// Maps the client's error: a server's refusal (serialization failure,
/// deadlock, constraint violation, any other SQL error) is
/// [`BackendFailure::Refused`]: the statement did nothing. A lost or
/// refused connection, or a server shutting down under the statement, is
/// [`BackendFailure::Unavailable`]: it may or may not have taken effect.
pub(crate) fn postgres_error(error: tokio_postgres::Error) -> Error {
    let failure = match error.code() {
        Some(code) if is_unavailable(code) => BackendFailure::Unavailable,
        Some(_) => BackendFailure::Refused,
        None => BackendFailure::Unavailable,
    };
    if error.as_db_error().is_some() {
        return backend(failure, Box::new(ServerError(error)));
    }
    backend(failure, Box::new(error))
}

/// A server's error, said with its message: the client's own says only
/// `db error`, which tells an operator nothing (`permission denied for
/// schema public` is what they need to read). The client's error stays
/// the source.
#[derive(Debug)]
struct ServerError(tokio_postgres::Error);

impl std::fmt::Display for ServerError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_db_error() {
            Some(db) => write!(formatter, "{} {}: {}", db.severity(), db.code().code(), db.message()),
            None => write!(formatter, "{}", self.0),
        }
    }
}

impl std::error::Error for ServerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Connection exceptions (class 08), a server shutting down or starting
/// (57P01..57P03), and a cancelled statement (57014, a timeout).
fn is_unavailable(code: &SqlState) -> bool {
    code.code().starts_with("08")
        || [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW, SqlState::QUERY_CANCELED]
            .contains(code)
}

/// Maps the pool's error: no connection could be had.
pub(crate) fn pool_error(error: deadpool_postgres::PoolError) -> Error {
    match error {
        deadpool_postgres::PoolError::Backend(error) => postgres_error(error),
        other => backend(BackendFailure::Unavailable, Box::new(other)),
    }
}

/// A call that got no answer in time.
pub(super) fn timed_out(what: &str) -> Error {
    backend(BackendFailure::Unavailable, format!("{what}: no answer in time").into())
}

/// An answer the contract does not know.
pub(super) fn protocol(what: &str) -> Error {
    backend(BackendFailure::Protocol, what.to_string().into())
}

fn column<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, index: usize, what: &str) -> Result<T> {
    row.try_get(index).map_err(|_| protocol(what))
}

/// The checkpoint stored as `bytes` (see [`crate::checkpoint`]);
/// `None` for none.
fn checkpoint(bytes: Option<Vec<u8>>, what: &str) -> Result<Option<Checkpoint>> {
    match bytes {
        Some(bytes) => crate::checkpoint::decode(&bytes).map_err(|reason| protocol(&format!("{what}: {reason}"))),
        None => Ok(None),
    }
}

/// The answer of `idemkv_claim` (its seven columns: answer, token,
/// attempt, recovered, ms left, response, checkpoint).
pub(super) fn claim(address: Address<'_>, row: &Row) -> Result<BackendClaim> {
    let answer: String = column(row, 0, "claim: answer")?;
    match answer.as_str() {
        "A" => {
            let token: i64 = column(row, 1, "claim: token")?;
            let attempt: i32 = column(row, 2, "claim: attempt")?;
            Ok(BackendClaim::Acquired {
                token: LeaseToken {
                    keyspace: address.keyspace,
                    scope: address.scope.to_vec(),
                    key: address.key.to_vec(),
                    token: u64::try_from(token).map_err(|_| protocol("claim: token"))?,
                },
                attempt: u32::try_from(attempt).map_err(|_| protocol("claim: attempt"))?,
                recovered: column(row, 3, "claim: recovered")?,
                checkpoint: checkpoint(column(row, 6, "claim: checkpoint")?, "claim")?,
            })
        }
        "R" => Ok(BackendClaim::Replay(column(row, 5, "claim: response")?)),
        "I" => {
            let left: i64 = column(row, 4, "claim: ms left")?;
            let left = u64::try_from(left).map_err(|_| protocol("claim: ms left"))?;
            Ok(BackendClaim::InProgress { retry_after: Duration::from_millis(left) })
        }
        "M" => Ok(BackendClaim::Mismatch),
        _ => Err(protocol("claim: unknown answer")),
    }
}

/// A whole non-negative number from a `bigint` column.
fn unsigned(row: &Row, index: usize, what: &str) -> Result<u64> {
    let value: i64 = column(row, index, what)?;
    u64::try_from(value).map_err(|_| protocol(what))
}

/// The record of `(scope, key)` from the `GET` statement's columns: state,
/// fingerprint, token, attempt, recovered, created ms, updated ms,
/// deadline ms, response, checkpoint, TTL ms.
pub(super) fn record(address: Address<'_>, row: &Row) -> Result<Record> {
    let Address { keyspace, scope, key } = address;
    let state: String = column(row, 0, "get: state")?;
    let state = match state.as_str() {
        "P" => State::Processing,
        "C" => State::Completed,
        "F" => State::Failed,
        _ => return Err(protocol("get: unknown state")),
    };
    let fingerprint: Vec<u8> = column(row, 1, "get: fingerprint")?;
    let fingerprint = <[u8; 32]>::try_from(fingerprint.as_slice())
        .map(Fingerprint::from_bytes)
        .map_err(|_| protocol("get: fingerprint"))?;
    let attempt: i32 = column(row, 3, "get: attempt")?;
    Ok(Record {
        keyspace,
        scope: scope.to_vec(),
        key: key.to_vec(),
        state,
        fingerprint,
        token: unsigned(row, 2, "get: token")?,
        attempt: u32::try_from(attempt).map_err(|_| protocol("get: attempt"))?,
        recovered: column(row, 4, "get: recovered")?,
        created_ms: unsigned(row, 5, "get: created")?,
        updated_ms: unsigned(row, 6, "get: updated")?,
        deadline_ms: unsigned(row, 7, "get: deadline")?,
        ttl_ms: unsigned(row, 10, "get: ttl")?,
        response: column(row, 8, "get: response")?,
        checkpoint: match state {
            State::Processing => checkpoint(column(row, 9, "get: checkpoint")?, "get")?,
            State::Completed | State::Failed => None,
        },
    })
}
