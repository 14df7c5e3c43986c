//! The schema the crate creates and migrates, and the server-side functions
//! behind every transition (one statement, one round trip each).
//!
//! Every object lives in one PostgreSQL schema (`public` unless
//! [`PostgresOptions::schema`](super::PostgresOptions::schema) says
//! otherwise), so several stores share a database without sharing a key.
//! Migrations are numbered from 1; `idemkv_schema_version` (in the same
//! schema) holds one row per applied migration. [`migrate`] applies the
//! missing ones in one transaction under an advisory lock, so that owners
//! migrating together migrate once; it is the only code that runs DDL, and
//! it runs as the schema's owner, once per release, not at every connect.
//! [`check`] is what `connect` runs instead: it reads the version and the
//! connecting role's privileges and changes nothing. A database migrated
//! by a newer build (a version this build does not know) is refused rather
//! than used.
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
//! processing, finish + TTL after), (from version 4) `reap_at`, a bound
//! of `expires_at` from above, indexed for the reaper, and (from
//! version 2) `checkpoint`: the checkpoint of a Processing row, the
//! bytes of [`crate::checkpoint`]'s encoding, `NULL` for none and once
//! finished. A renewal keeps it, a takeover of an ended lease answers it
//! and keeps it, every other claim that writes (absent, expired, or a
//! Failed key run again under
//! [`ReusePolicy::RetryFailed`](crate::ReusePolicy::RetryFailed)) clears
//! it; a release or a removal deletes the row.
//!
//! A table of version 1 is upgraded in place by the migration: the column is
//! added (`ADD COLUMN IF NOT EXISTS`, no default, so no rewrite), rows
//! already there have no checkpoint, and the claim of version 1 stays
//! beside the new one for instances of the earlier build still running.
//!
//! A row past `expires_at` is absent to every call (a claim starts afresh,
//! attempt 1), whether or not the reaper has deleted it yet. Every time is
//! the server's (`clock_timestamp()`), never a client's.

use super::options::Schema;
use super::reply::{postgres_error, protocol};
use crate::error::{Error, Result};
use std::borrow::Cow;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

/// The newest schema version this build knows.
pub(super) const SCHEMA_VERSION: i32 = 4;

/// The advisory lock key held while migrating (`idemkv` in ASCII).
const MIGRATION_LOCK: i64 = 0x6964_656d_6b76;

/// The functions that name the store's own objects, by signature: version 3
/// binds each to its schema.
const BOUND: [&str; 7] = [
    "idemkv_claim(bytea, bytea, bytea, bigint, bigint, boolean, text)",
    "idemkv_claim(bytea, bytea, bytea, bigint, bigint, boolean)",
    "idemkv_finish(bytea, bytea, bigint, text, bytea)",
    "idemkv_renew(bytea, bytea, bigint, bigint)",
    "idemkv_checkpoint(bytea, bytea, bigint, bytea)",
    "idemkv_remove(bytea, bytea)",
    "idemkv_reap(integer)",
];

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

/// Version 3: every function that names the store's table, sequence or
/// other functions resolves them in its own schema, whatever the caller's
/// `search_path` (a transaction of the caller's own for `complete_in`, a
/// role whose path starts elsewhere): `pg_catalog` first (no object of the
/// schema can stand in for a built-in), temporary objects last (none can
/// stand in for the store's). Nothing else changes; rows stay as they are.
fn v3(schema: &Schema) -> String {
    let path = format!("pg_catalog, {}, pg_temp", schema.quoted());
    let statements: Vec<String> =
        BOUND.iter().map(|function| format!("ALTER FUNCTION {function} SET search_path = {path};")).collect();
    statements.join("\n")
}

/// Version 4: finishing a row writes no index entry. Until now the reaper's
/// index was on `expires_at`, which every completion moves (to finish +
/// TTL), so no completion could be a HOT update: each wrote a new entry in
/// both indexes. The reaper now finds rows by `reap_at`, a bound of
/// `expires_at` from above set by the claim (lease end + TTL) and moved
/// only when `expires_at` passes it (a renewal, a finish after the lease
/// ended), so that a completion within its lease changes no indexed column
/// and the table leaves room on each page for the completed version of its
/// rows (`fillfactor`). A row finished early is deleted up to one lease
/// after its expiry, as it is absent to every call from its expiry on.
///
/// Every row is rewritten once (its `reap_at` filled in), in the
/// migration's transaction; the functions are replaced (the claim of
/// version 1 stays the wrapper it is) and bound to the schema again.
fn v4(schema: &Schema) -> String {
    format!("{V4}\n{}", v3(schema))
}

const V4: &str = r"
ALTER TABLE idempo_store ADD COLUMN IF NOT EXISTS reap_at timestamptz;
UPDATE idempo_store SET reap_at = expires_at WHERE reap_at IS NULL;
ALTER TABLE idempo_store ALTER COLUMN reap_at SET NOT NULL;
CREATE INDEX IF NOT EXISTS idempo_store_reap_at ON idempo_store (reap_at);
DROP INDEX IF EXISTS idempo_store_expires_at;
ALTER TABLE idempo_store SET (fillfactor = 90);

-- Claim, as version 2's; the row's `reap_at` is its expiry.
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
        lease_end, ttl, response, created_at, updated_at, finished_at, expires_at, checkpoint, reap_at)
    VALUES (p_scope, p_key, p_fingerprint, 'P', nextval('idemkv_tokens'), 1, false, false,
        v_lease_end, v_ttl, '', v_now, v_now, NULL, v_lease_end + v_ttl, NULL, v_lease_end + v_ttl)
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
        checkpoint = CASE WHEN t.expires_at > v_now AND t.state = 'P' THEN t.checkpoint END,
        reap_at = excluded.reap_at
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

-- As version 2's; `reap_at` moves only when the new expiry passes it
-- (a finish after the lease ended), so a finish within the lease is HOT.
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
            expires_at = v_now + ttl, checkpoint = NULL, reap_at = greatest(reap_at, v_now + ttl)
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

-- As version 1's; `reap_at` follows a longer expiry.
CREATE OR REPLACE FUNCTION idemkv_renew(p_scope bytea, p_key bytea, p_token bigint, p_extend_ms bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_end timestamptz := v_now + p_extend_ms * interval '1 millisecond';
BEGIN
    UPDATE idempo_store
    SET lease_end = greatest(lease_end, v_end), expires_at = greatest(lease_end, v_end) + ttl, updated_at = v_now,
        reap_at = greatest(reap_at, greatest(lease_end, v_end) + ttl)
    WHERE scope = p_scope AND key = p_key AND token = p_token AND state = 'P' AND expires_at > v_now;
    RETURN FOUND;
END $$;

-- As version 1's, through the `reap_at` index: a row is deleted once both
-- its bound and its expiry have passed.
CREATE OR REPLACE FUNCTION idemkv_reap(p_batch integer)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_deleted bigint;
BEGIN
    WITH doomed AS (
        SELECT scope, key FROM idempo_store WHERE reap_at <= v_now AND expires_at <= v_now
        ORDER BY reap_at LIMIT p_batch FOR UPDATE SKIP LOCKED
    )
    DELETE FROM idempo_store t USING doomed d
    WHERE t.scope = d.scope AND t.key = d.key AND t.expires_at <= v_now;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END $$;
";

/// Migration `version` for `schema`.
fn migration(version: i32, schema: &Schema) -> Result<Cow<'static, str>> {
    match version {
        1 => Ok(Cow::Borrowed(V1)),
        2 => Ok(Cow::Borrowed(V2)),
        3 => Ok(Cow::Owned(v3(schema))),
        4 => Ok(Cow::Owned(v4(schema))),
        _ => Err(protocol("schema version")),
    }
}

/// What a migration did: the schema, and its version before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// The PostgreSQL schema migrated.
    pub schema: String,
    /// Its version before (0: it held no store).
    pub from: i32,
    /// Its version after: the one this build uses.
    pub to: i32,
}

/// The schema missing or too old, as [`Error::SchemaVersion`].
fn version_error(schema: &Schema, found: i32) -> Error {
    Error::SchemaVersion { schema: schema.name().to_owned(), found, expected: SCHEMA_VERSION }
}

/// Creates the schema when missing and brings it to [`SCHEMA_VERSION`],
/// in one transaction under an advisory lock.
pub(super) async fn migrate(client: &mut Client, schema: &Schema) -> Result<Migration> {
    let transaction = client.transaction().await.map_err(postgres_error)?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(postgres_error)?;
    // Looked up first: `CREATE SCHEMA IF NOT EXISTS` needs the database's
    // CREATE privilege even when the schema exists (made by a DBA for the
    // owner, say).
    let exists = transaction
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema.name()])
        .await
        .map_err(postgres_error)?;
    transaction.batch_execute(&setup(schema, exists.is_some())).await.map_err(postgres_error)?;
    let found = read_version(&transaction, schema).await.map_err(postgres_error)?;
    if found > SCHEMA_VERSION {
        return Err(version_error(schema, found));
    }
    let record = format!("INSERT INTO {} (version) VALUES ($1)", schema.object("idemkv_schema_version"));
    for version in (found + 1)..=SCHEMA_VERSION {
        transaction.batch_execute(&migration(version, schema)?).await.map_err(postgres_error)?;
        transaction.execute(&record, &[&version]).await.map_err(postgres_error)?;
    }
    transaction.commit().await.map_err(postgres_error)?;
    Ok(Migration { schema: schema.name().to_owned(), from: found, to: SCHEMA_VERSION })
}

/// Before the migrations: the schema (unless it `exists`), the migrations'
/// unqualified names pointed into it, the version table.
fn setup(schema: &Schema, exists: bool) -> String {
    let create = if exists { String::new() } else { format!("CREATE SCHEMA {};", schema.quoted()) };
    format!(
        "{create}
        SET LOCAL search_path TO {};
        CREATE TABLE IF NOT EXISTS {} (
            version integer PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT clock_timestamp());",
        schema.quoted(),
        schema.object("idemkv_schema_version")
    )
}

async fn read_version(
    client: &impl tokio_postgres::GenericClient,
    schema: &Schema,
) -> Result<i32, tokio_postgres::Error> {
    let sql = format!("SELECT coalesce(max(version), 0) FROM {}", schema.object("idemkv_schema_version"));
    client.query_one(&sql, &[]).await?.try_get(0)
}

/// What the connecting role needs, beyond USAGE on the schema: `(kind,
/// object, privilege)`, checked one privilege at a time (`has_*_privilege`
/// with a list answers whether *any* is held).
const NEEDED: [(&str, &str, &str); 14] = [
    ("table", "idempo_store", "SELECT"),
    ("table", "idempo_store", "INSERT"),
    ("table", "idempo_store", "UPDATE"),
    ("table", "idempo_store", "DELETE"),
    ("table", "idemkv_schema_version", "SELECT"),
    ("sequence", "idemkv_tokens", "USAGE"),
    ("function", BOUND[0], "EXECUTE"),
    ("function", BOUND[2], "EXECUTE"),
    ("function", BOUND[3], "EXECUTE"),
    ("function", BOUND[4], "EXECUTE"),
    ("function", BOUND[5], "EXECUTE"),
    ("function", BOUND[6], "EXECUTE"),
    ("function", "idemkv_ms(timestamptz)", "EXECUTE"),
    ("function", "idemkv_tag(bytea, bytea)", "EXECUTE"),
];

/// What `connect` checks, changing nothing: the schema exists, the role
/// may use it, the store in it is at [`SCHEMA_VERSION`], and the role holds
/// every privilege the calls need. Refusing here, with the whole list,
/// beats a `permission denied` at the first claim of some request.
pub(super) async fn check(client: &Client, schema: &Schema) -> Result<()> {
    let usage = client
        .query_opt("SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace WHERE nspname = $1", &[&schema.name()])
        .await
        .map_err(postgres_error)?;
    match usage.map(|row| row.try_get::<_, bool>(0)) {
        None => return Err(version_error(schema, 0)),
        Some(Ok(true)) => {}
        Some(Ok(false)) => return Err(privileges(client, vec![format!("USAGE on schema {}", schema.quoted())]).await),
        Some(Err(_)) => return Err(protocol("schema privilege")),
    }
    match read_version(client, schema).await {
        Ok(found) if found == SCHEMA_VERSION => {}
        Ok(found) => return Err(version_error(schema, found)),
        Err(error) if error.code() == Some(&SqlState::UNDEFINED_TABLE) => return Err(version_error(schema, 0)),
        // Refused: the list below says which privileges are missing.
        Err(error) if error.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {}
        Err(error) => return Err(postgres_error(error)),
    }
    let missing = missing_privileges(client, schema).await?;
    if missing.is_empty() {
        Ok(())
    } else {
        Err(privileges(client, missing).await)
    }
}

/// The privileges of [`NEEDED`] the role lacks, as `PRIVILEGE on kind
/// object`.
async fn missing_privileges(client: &Client, schema: &Schema) -> Result<Vec<String>> {
    let objects: Vec<String> = NEEDED.iter().map(|(_, object, _)| schema.object(object)).collect();
    let checks: Vec<String> = NEEDED
        .iter()
        .enumerate()
        .map(|(index, (kind, _, privilege))| format!("has_{kind}_privilege(${}, '{privilege}')", index + 1))
        .collect();
    let sql = format!("SELECT ARRAY[{}]", checks.join(", "));
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        objects.iter().map(|object| object as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
    let row = client.query_one(&sql, &params).await.map_err(postgres_error)?;
    let held: Vec<bool> = row.try_get(0).map_err(|_| protocol("privileges"))?;
    Ok(NEEDED
        .iter()
        .zip(&objects)
        .zip(held)
        .filter(|(_, held)| !held)
        .map(|(((kind, _, privilege), object), _)| format!("{privilege} on {kind} {object}"))
        .collect())
}

/// [`Error::MissingPrivileges`] for the connected role.
async fn privileges(client: &Client, missing: Vec<String>) -> Error {
    let role = match client.query_one("SELECT current_user::text", &[]).await {
        Ok(row) => row.try_get(0).unwrap_or_default(),
        Err(_) => String::new(),
    };
    Error::MissingPrivileges { role, missing }
}
