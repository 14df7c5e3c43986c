//! The schema the crate creates and migrates, and the server-side functions
//! behind every transition (one statement, one round trip each).
//!
//! Migrations are numbered from 1; `idemkv_schema_version` holds one row
//! per applied migration. [`migrate`] applies the missing ones in one
//! transaction under an advisory lock, so that service instances starting
//! together migrate once; a database migrated by a newer build (a version
//! this build does not know) is refused rather than used.
//!
//! # Tables
//!
//! `idempo_store`, primary key `(scope, key)`, both `bytea`:
//! `fingerprint` (32 bytes), `state` (`P` processing, `C` completed, `F`
//! failed), `token` (fencing token, from the global sequence
//! `idemkv_tokens`: never reused for any key, across release and expiry),
//! `attempt`, `recovered`, `waited` (a `claim_wait` waits on the key, so
//! its finish notifies), `lease_end`, `ttl`, `response`, `created_at`,
//! `updated_at`, `finished_at`, `expires_at` (lease end + TTL while
//! processing, finish + TTL after), indexed for the reaper, and (from
//! version 2) `checkpoint`: the checkpoint of a Processing row, the
//! bytes of [`crate::checkpoint`]'s encoding, `NULL` for none and once
//! finished. A renewal keeps it, a takeover of an ended lease answers it
//! and keeps it, every other claim that writes (absent, expired, or a
//! Failed key run again under
//! [`ReusePolicy::RetryFailed`](crate::ReusePolicy::RetryFailed)) clears
//! it; a release or a removal deletes the row.
//!
//! A table of version 1 is upgraded in place at connect: the column is
//! added (`ADD COLUMN IF NOT EXISTS`, no default, so no rewrite), rows
//! already there have no checkpoint, and the claim of version 1 stays
//! beside the new one for instances of the earlier build still running.
//!
//! A row past `expires_at` is absent to every call (a claim starts afresh,
//! attempt 1), whether or not the reaper has deleted it yet. Every time is
//! the server's (`clock_timestamp()`), never a client's.

use super::reply::{postgres_error, protocol};
use crate::error::Result;
use deadpool_postgres::Client;

/// The newest schema version this build knows.
pub(super) const SCHEMA_VERSION: i32 = 2;

/// The advisory lock key held while migrating (`idemkv` in ASCII).
const MIGRATION_LOCK: i64 = 0x6964_656d_6b76;

/// Migration `n` is `MIGRATIONS[n - 1]`.
const MIGRATIONS: [&str; 2] = [V1, V2];

const V1: &str = r"
CREATE SEQUENCE idemkv_tokens AS bigint;

CREATE TABLE idempo_store (
    scope bytea NOT NULL,
    key bytea NOT NULL,
    fingerprint bytea NOT NULL,
    state text NOT NULL CHECK (state IN ('P', 'C', 'F')),
    token bigint NOT NULL,
    attempt integer NOT NULL,
    recovered boolean NOT NULL,
    waited boolean NOT NULL,
    lease_end timestamptz NOT NULL,
    ttl interval NOT NULL,
    response bytea NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    finished_at timestamptz,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE INDEX idempo_store_expires_at ON idempo_store (expires_at);

-- The notification payload of a key: the first 16 bytes of
-- SHA-256(u32 big-endian scope length, scope, key), in hex.
CREATE FUNCTION idemkv_tag(p_scope bytea, p_key bytea) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT encode(substr(sha256(int4send(length(p_scope)) || p_scope || p_key), 1, 16), 'hex')
$$;

CREATE FUNCTION idemkv_ms(p_time timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT floor(extract(epoch FROM p_time) * 1000)::bigint
$$;

-- Claim: answers 'A' (acquired: token, attempt, recovered), 'R' (replay:
-- response), 'I' (in progress: attempt, ms left) or 'M' (mismatch). The
-- insert takes the key when it is absent, expired, or held by an expired
-- lease of the same request; otherwise ON CONFLICT has locked the row,
-- and the select reads it as it stands.
CREATE FUNCTION idemkv_claim(
    p_scope bytea, p_key bytea, p_fingerprint bytea, p_lease_ms bigint, p_ttl_ms bigint, p_wait boolean,
    OUT o_answer text, OUT o_token bigint, OUT o_attempt integer, OUT o_recovered boolean,
    OUT o_left_ms bigint, OUT o_response bytea)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_lease_end timestamptz := v_now + p_lease_ms * interval '1 millisecond';
    v_ttl interval := p_ttl_ms * interval '1 millisecond';
    r idempo_store%ROWTYPE;
BEGIN
    -- A live row that answers without a change (replay, mismatch, in
    -- progress) is answered from a plain read: no lock, no transaction id,
    -- no commit to flush, no token drawn. Finished rows stay as they are
    -- until they expire, so the answer holds as of this statement.
    SELECT * INTO r FROM idempo_store WHERE scope = p_scope AND key = p_key;
    IF FOUND AND r.expires_at > v_now THEN
        IF r.fingerprint <> p_fingerprint THEN
            o_answer := 'M';
            RETURN;
        ELSIF r.state <> 'P' THEN
            o_answer := 'R';
            o_response := r.response;
            RETURN;
        ELSIF r.lease_end > v_now AND (r.waited OR NOT p_wait) THEN
            o_answer := 'I';
            o_attempt := r.attempt;
            o_left_ms := greatest(ceil(extract(epoch FROM r.lease_end - v_now) * 1000), 0)::bigint;
            RETURN;
        END IF;
    END IF;
    INSERT INTO idempo_store AS t (scope, key, fingerprint, state, token, attempt, recovered, waited,
        lease_end, ttl, response, created_at, updated_at, finished_at, expires_at)
    VALUES (p_scope, p_key, p_fingerprint, 'P', nextval('idemkv_tokens'), 1, false, false,
        v_lease_end, v_ttl, '', v_now, v_now, NULL, v_lease_end + v_ttl)
    ON CONFLICT (scope, key) DO UPDATE SET
        fingerprint = excluded.fingerprint,
        state = 'P',
        token = excluded.token,
        attempt = CASE WHEN t.expires_at <= v_now THEN 1 ELSE t.attempt + 1 END,
        recovered = t.expires_at > v_now,
        waited = false,
        lease_end = excluded.lease_end,
        ttl = excluded.ttl,
        response = '',
        created_at = CASE WHEN t.expires_at <= v_now THEN v_now ELSE t.created_at END,
        updated_at = v_now,
        finished_at = NULL,
        expires_at = excluded.expires_at
    WHERE t.expires_at <= v_now
       OR (t.state = 'P' AND t.lease_end <= v_now AND t.fingerprint = excluded.fingerprint)
    RETURNING t.token, t.attempt, t.recovered INTO o_token, o_attempt, o_recovered;
    IF FOUND THEN
        o_answer := 'A';
        RETURN;
    END IF;
    SELECT * INTO r FROM idempo_store WHERE scope = p_scope AND key = p_key;
    IF NOT FOUND THEN
        o_answer := 'X';
    ELSIF r.fingerprint <> p_fingerprint THEN
        o_answer := 'M';
    ELSIF r.state <> 'P' THEN
        o_answer := 'R';
        o_response := r.response;
    ELSE
        o_answer := 'I';
        o_attempt := r.attempt;
        o_left_ms := greatest(ceil(extract(epoch FROM r.lease_end - v_now) * 1000), 0)::bigint;
        IF p_wait AND NOT r.waited THEN
            UPDATE idempo_store SET waited = true WHERE scope = p_scope AND key = p_key;
        END IF;
    END IF;
END $$;

-- Complete ('C'), fail ('F') or release ('D': the row is deleted) while
-- `p_token` holds the key. Returns whether it did; notifies waiters.
CREATE FUNCTION idemkv_finish(p_scope bytea, p_key bytea, p_token bigint, p_kind text, p_response bytea)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_waited boolean;
BEGIN
    IF p_kind = 'D' THEN
        DELETE FROM idempo_store
        WHERE scope = p_scope AND key = p_key AND token = p_token AND state = 'P' AND expires_at > v_now
        RETURNING waited INTO v_waited;
    ELSIF p_kind IN ('C', 'F') THEN
        UPDATE idempo_store
        SET state = p_kind, response = p_response, updated_at = v_now, finished_at = v_now,
            expires_at = v_now + ttl
        WHERE scope = p_scope AND key = p_key AND token = p_token AND state = 'P' AND expires_at > v_now
        RETURNING waited INTO v_waited;
    ELSE
        RAISE EXCEPTION 'idemkv_finish: unknown kind %', p_kind;
    END IF;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_waited THEN
        PERFORM pg_notify('idemkv', idemkv_tag(p_scope, p_key));
    END IF;
    RETURN true;
END $$;

-- Renew: the lease ends at least `p_extend_ms` from now.
CREATE FUNCTION idemkv_renew(p_scope bytea, p_key bytea, p_token bigint, p_extend_ms bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_end timestamptz := v_now + p_extend_ms * interval '1 millisecond';
BEGIN
    UPDATE idempo_store
    SET lease_end = greatest(lease_end, v_end), expires_at = greatest(lease_end, v_end) + ttl, updated_at = v_now
    WHERE scope = p_scope AND key = p_key AND token = p_token AND state = 'P' AND expires_at > v_now;
    RETURN FOUND;
END $$;

-- Remove whatever the state; returns whether a live row was removed.
CREATE FUNCTION idemkv_remove(p_scope bytea, p_key bytea)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_live boolean;
    v_waited boolean;
BEGIN
    DELETE FROM idempo_store WHERE scope = p_scope AND key = p_key
    RETURNING expires_at > clock_timestamp(), waited INTO v_live, v_waited;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_waited THEN
        PERFORM pg_notify('idemkv', idemkv_tag(p_scope, p_key));
    END IF;
    RETURN v_live;
END $$;

-- Deletes up to `p_batch` expired rows, oldest expiry first, skipping rows
-- a claim holds locked; returns how many.
CREATE FUNCTION idemkv_reap(p_batch integer)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_deleted bigint;
BEGIN
    WITH doomed AS (
        SELECT scope, key FROM idempo_store WHERE expires_at <= v_now
        ORDER BY expires_at LIMIT p_batch FOR UPDATE SKIP LOCKED
    )
    DELETE FROM idempo_store t USING doomed d
    WHERE t.scope = d.scope AND t.key = d.key AND t.expires_at <= v_now;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END $$;
";

/// Checkpoints and reuse policies. The table of version 1 gains a
/// column in place (no rewrite: the column has no default); the claim
/// gains an argument and an answer as a new function beside the old one,
/// which stays (a wrapper replaying failures) for instances of the earlier
/// build still running during a rolling upgrade.
const V2: &str = r"
ALTER TABLE idempo_store ADD COLUMN IF NOT EXISTS checkpoint bytea;

-- Claim, as version 1's, with the reuse policy `p_reuse` ('retry' runs a
-- Failed key of the same request again: attempt + 1, not recovered, a new
-- creation time; anything else replays the failure) and the recovery
-- point in `o_checkpoint`: a takeover of an ended lease answers the stored
-- one and keeps it in the row; every other claim that writes starts
-- without one.
CREATE OR REPLACE FUNCTION idemkv_claim(
    p_scope bytea, p_key bytea, p_fingerprint bytea, p_lease_ms bigint, p_ttl_ms bigint, p_wait boolean,
    p_reuse text,
    OUT o_answer text, OUT o_token bigint, OUT o_attempt integer, OUT o_recovered boolean,
    OUT o_left_ms bigint, OUT o_response bytea, OUT o_checkpoint bytea)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_lease_end timestamptz := v_now + p_lease_ms * interval '1 millisecond';
    v_ttl interval := p_ttl_ms * interval '1 millisecond';
    v_retry boolean := coalesce(p_reuse = 'retry', false);
    r idempo_store%ROWTYPE;
BEGIN
    -- A live row that answers without a change (replay, mismatch, in
    -- progress) is answered from a plain read: no lock, no transaction id,
    -- no commit to flush, no token drawn. Finished rows stay as they are
    -- until they expire, so the answer holds as of this statement.
    SELECT * INTO r FROM idempo_store WHERE scope = p_scope AND key = p_key;
    IF FOUND AND r.expires_at > v_now THEN
        IF r.fingerprint <> p_fingerprint THEN
            o_answer := 'M';
            RETURN;
        ELSIF r.state = 'C' OR (r.state = 'F' AND NOT v_retry) THEN
            o_answer := 'R';
            o_response := r.response;
            RETURN;
        ELSIF r.state = 'P' AND r.lease_end > v_now AND (r.waited OR NOT p_wait) THEN
            o_answer := 'I';
            o_attempt := r.attempt;
            o_left_ms := greatest(ceil(extract(epoch FROM r.lease_end - v_now) * 1000), 0)::bigint;
            RETURN;
        END IF;
    END IF;
    INSERT INTO idempo_store AS t (scope, key, fingerprint, state, token, attempt, recovered, waited,
        lease_end, ttl, response, created_at, updated_at, finished_at, expires_at, checkpoint)
    VALUES (p_scope, p_key, p_fingerprint, 'P', nextval('idemkv_tokens'), 1, false, false,
        v_lease_end, v_ttl, '', v_now, v_now, NULL, v_lease_end + v_ttl, NULL)
    ON CONFLICT (scope, key) DO UPDATE SET
        fingerprint = excluded.fingerprint,
        state = 'P',
        token = excluded.token,
        attempt = CASE WHEN t.expires_at <= v_now THEN 1 ELSE t.attempt + 1 END,
        recovered = t.expires_at > v_now AND t.state = 'P',
        waited = false,
        lease_end = excluded.lease_end,
        ttl = excluded.ttl,
        response = '',
        created_at = CASE WHEN t.expires_at > v_now AND t.state = 'P' THEN t.created_at ELSE v_now END,
        updated_at = v_now,
        finished_at = NULL,
        expires_at = excluded.expires_at,
        checkpoint = CASE WHEN t.expires_at > v_now AND t.state = 'P' THEN t.checkpoint END
    WHERE t.expires_at <= v_now
       OR (t.state = 'P' AND t.lease_end <= v_now AND t.fingerprint = excluded.fingerprint)
       OR (v_retry AND t.state = 'F' AND t.fingerprint = excluded.fingerprint)
    RETURNING t.token, t.attempt, t.recovered, t.checkpoint INTO o_token, o_attempt, o_recovered, o_checkpoint;
    IF FOUND THEN
        o_answer := 'A';
        RETURN;
    END IF;
    SELECT * INTO r FROM idempo_store WHERE scope = p_scope AND key = p_key;
    IF NOT FOUND THEN
        o_answer := 'X';
    ELSIF r.fingerprint <> p_fingerprint THEN
        o_answer := 'M';
    ELSIF r.state <> 'P' THEN
        o_answer := 'R';
        o_response := r.response;
    ELSE
        o_answer := 'I';
        o_attempt := r.attempt;
        o_left_ms := greatest(ceil(extract(epoch FROM r.lease_end - v_now) * 1000), 0)::bigint;
        IF p_wait AND NOT r.waited THEN
            UPDATE idempo_store SET waited = true WHERE scope = p_scope AND key = p_key;
        END IF;
    END IF;
END $$;

-- Version 1's claim: failures replayed, no checkpoint answered.
CREATE OR REPLACE FUNCTION idemkv_claim(
    p_scope bytea, p_key bytea, p_fingerprint bytea, p_lease_ms bigint, p_ttl_ms bigint, p_wait boolean,
    OUT o_answer text, OUT o_token bigint, OUT o_attempt integer, OUT o_recovered boolean,
    OUT o_left_ms bigint, OUT o_response bytea)
LANGUAGE sql AS $$
    SELECT c.o_answer, c.o_token, c.o_attempt, c.o_recovered, c.o_left_ms, c.o_response
    FROM idemkv_claim(p_scope, p_key, p_fingerprint, p_lease_ms, p_ttl_ms, p_wait, 'replay') c
$$;

-- As version 1's; completing or failing drops the checkpoint.
CREATE OR REPLACE FUNCTION idemkv_finish(p_scope bytea, p_key bytea, p_token bigint, p_kind text, p_response bytea)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_waited boolean;
BEGIN
    IF p_kind = 'D' THEN
        DELETE FROM idempo_store
        WHERE scope = p_scope AND key = p_key AND token = p_token AND state = 'P' AND expires_at > v_now
        RETURNING waited INTO v_waited;
    ELSIF p_kind IN ('C', 'F') THEN
        UPDATE idempo_store
        SET state = p_kind, response = p_response, updated_at = v_now, finished_at = v_now,
            expires_at = v_now + ttl, checkpoint = NULL
        WHERE scope = p_scope AND key = p_key AND token = p_token AND state = 'P' AND expires_at > v_now
        RETURNING waited INTO v_waited;
    ELSE
        RAISE EXCEPTION 'idemkv_finish: unknown kind %', p_kind;
    END IF;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_waited THEN
        PERFORM pg_notify('idemkv', idemkv_tag(p_scope, p_key));
    END IF;
    RETURN true;
END $$;

-- Checkpoint: the checkpoint of the lease `p_token` becomes
-- `p_checkpoint`; the lease end stays. The same checks as a renewal.
CREATE OR REPLACE FUNCTION idemkv_checkpoint(p_scope bytea, p_key bytea, p_token bigint, p_checkpoint bytea)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    UPDATE idempo_store SET checkpoint = p_checkpoint, updated_at = v_now
    WHERE scope = p_scope AND key = p_key AND token = p_token AND state = 'P' AND expires_at > v_now;
    RETURN FOUND;
END $$;
";

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction under an
/// advisory lock; returns the version found before.
pub(super) async fn migrate(client: &mut Client) -> Result<i32> {
    let transaction = client.transaction().await.map_err(postgres_error)?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(postgres_error)?;
    transaction
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS idemkv_schema_version (
                version integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT clock_timestamp())",
        )
        .await
        .map_err(postgres_error)?;
    let row = transaction
        .query_one("SELECT coalesce(max(version), 0) FROM idemkv_schema_version", &[])
        .await
        .map_err(postgres_error)?;
    let found: i32 = row.try_get(0).map_err(|_| protocol("schema version"))?;
    if found > SCHEMA_VERSION {
        return Err(crate::Error::InvalidConfig(format!(
            "postgres: the schema is at version {found}, this build knows up to {SCHEMA_VERSION}"
        )));
    }
    for version in (found + 1)..=SCHEMA_VERSION {
        let index = usize::try_from(version - 1).map_err(|_| protocol("schema version"))?;
        let migration = MIGRATIONS.get(index).ok_or_else(|| protocol("schema version"))?;
        transaction.batch_execute(migration).await.map_err(postgres_error)?;
        transaction
            .execute("INSERT INTO idemkv_schema_version (version) VALUES ($1)", &[&version])
            .await
            .map_err(postgres_error)?;
    }
    transaction.commit().await.map_err(postgres_error)?;
    Ok(found)
}
