//! `--postgres URL`: the payments service on PostgreSQL, where the charge
//! and the key's completion commit in **one transaction** — a crash can
//! leave neither "charged but not recorded" nor "recorded but not
//! charged". The handler claims the key itself (the layer finishes a key
//! after the handler's answer, outside any transaction of the handler's):
//! claim, then in one transaction insert the charge and `complete_in`,
//! then commit.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use idemkv::backend::postgres::{PostgresBackend, PostgresOptions};
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Fingerprint, LeaseToken,
};
use std::sync::Arc;

/// The charges table: the business rows the key's completion commits with.
const CREATE_CHARGES: &str =
    "CREATE TABLE IF NOT EXISTS payments_charges (id bigserial PRIMARY KEY, account text NOT NULL, body text NOT NULL)";

/// Migrates the idempotency schema (a production service leaves that to
/// its owner's `idemkv migrate --postgres URL` and connects with a role
/// that cannot run DDL; this example owns its database), connects (the
/// backend's elected reaper deletes expired rows) and creates the charges
/// table.
pub async fn connect(url: &str) -> Result<Arc<PostgresBackend>, String> {
    let said = |error| match error {
        idemkv::Error::InvalidConfig(message) => format!("bad PostgreSQL URL: {message}"),
        error => format!("cannot connect to PostgreSQL: {error}"),
    };
    PostgresBackend::migrate(url, &PostgresOptions::new()).await.map_err(said)?;
    let backend = PostgresBackend::connect(url, Config::new()).await.map_err(said)?;
    let client = backend.pool().get().await.map_err(|error| format!("PostgreSQL: {error}"))?;
    client.batch_execute(CREATE_CHARGES).await.map_err(|error| format!("PostgreSQL: {error}"))?;
    Ok(Arc::new(backend))
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [("content-type", "application/json")], body).into_response()
}

/// `POST /payments`: the same contract as the layer gives the other
/// backends (400 without a key or account, 409 while in progress, 422 for
/// a reused key, the stored answer with `Idempotency-Replay: true`).
pub async fn pay(State(backend): State<Arc<PostgresBackend>>, headers: HeaderMap, body: Bytes) -> Response {
    let (Some(account), Some(key)) = (headers.get("x-account"), headers.get("idempotency-key")) else {
        return json(StatusCode::BAD_REQUEST, "{\"error\":\"X-Account and Idempotency-Key are required\"}".into());
    };
    let fingerprint = Fingerprint::builder().part(b"POST").part(b"/payments").part(&body).finish();
    let claimed = backend.claim(account.as_bytes(), key.as_bytes(), fingerprint, ClaimOptions::new()).await;
    match claimed {
        Ok(BackendClaim::Acquired { token, .. }) => match charge(&backend, &token, account.as_bytes(), &body).await {
            Ok(answer) => json(StatusCode::CREATED, answer),
            Err(Failed::RolledBack(error)) => {
                // Nothing was charged: the key is freed for the retry.
                let _ = backend.release(&token).await;
                json(StatusCode::SERVICE_UNAVAILABLE, format!("{{\"error\":\"{error}\"}}"))
            }
            // The commit's outcome is unknown: the key stays held; after
            // its lease the retry finds it completed (the commit happened)
            // or runs as a recovered attempt (it did not).
            Err(Failed::Unknown(error)) => json(StatusCode::SERVICE_UNAVAILABLE, format!("{{\"error\":\"{error}\"}}")),
        },
        Ok(BackendClaim::Replay(stored)) => {
            let mut response = json(StatusCode::CREATED, String::from_utf8_lossy(&stored).into_owned());
            response.headers_mut().insert("idempotency-replay", axum::http::HeaderValue::from_static("true"));
            response
        }
        Ok(BackendClaim::InProgress { retry_after }) => {
            let mut response = json(StatusCode::CONFLICT, "{\"error\":\"in progress\"}".into());
            let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
            response.headers_mut().insert("retry-after", seconds.into());
            response
        }
        Ok(BackendClaim::Mismatch) => json(StatusCode::UNPROCESSABLE_ENTITY, "{\"error\":\"key reused\"}".into()),
        Ok(_) => json(StatusCode::INTERNAL_SERVER_ERROR, "{\"error\":\"unknown answer\"}".into()),
        Err(error) => json(StatusCode::SERVICE_UNAVAILABLE, format!("{{\"error\":\"{error}\"}}")),
    }
}

/// How a charge failed.
enum Failed {
    /// Before the commit: rolled back, nothing charged.
    RolledBack(String),
    /// At the commit: it may or may not have happened.
    Unknown(String),
}

/// Inserts the charge and completes the key in one transaction.
async fn charge(backend: &PostgresBackend, token: &LeaseToken, account: &[u8], body: &[u8]) -> Result<String, Failed> {
    let failed = |error: &dyn std::fmt::Display| Failed::RolledBack(error.to_string());
    let mut client = backend.pool().get().await.map_err(|error| failed(&error))?;
    let transaction = client.transaction().await.map_err(|error| failed(&error))?;
    let (account, body) = (String::from_utf8_lossy(account), String::from_utf8_lossy(body).replace('\n', " "));
    let row = transaction
        .query_one("INSERT INTO payments_charges (account, body) VALUES ($1, $2) RETURNING id", &[&account, &body])
        .await
        .map_err(|error| failed(&error))?;
    let id: i64 = row.get(0);
    let answer = format!("{{\"payment\":{id},\"charged\":{body}}}");
    backend.complete_in(&transaction, token, answer.as_bytes()).await.map_err(|error| failed(&error))?;
    transaction.commit().await.map_err(|error| Failed::Unknown(error.to_string()))?;
    Ok(answer)
}
