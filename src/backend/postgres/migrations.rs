//! The SQL of each schema version, applied in order by
//! `schema::migrate`: the tables, indexes and functions
//! of version 1 and what each later version changes. A version once
//! released is never edited; a change is a new version.

use super::options::Schema;
use super::reply::protocol;
use crate::error::Result;
use std::borrow::Cow;

/// The functions that name the store's own objects, by signature: version 3
/// binds each to its schema.
pub(super) const BOUND: [&str; 7] = [
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

/// Version 6: the rows whose completion carries staged messages (an
/// outbox's envelope) are found without reading the others, so that a
/// relay's sweep costs what is pending. A column `staged`, true for those
/// rows and NULL for every other, and a partial index of `(scope, key)`
/// where it is true: a sweep's page is a range of that index. The column,
/// not the response, is the index's predicate, so that a completion
/// without messages changes no column an index names and stays a HOT
/// update (version 4); the completion that stages, and the relay's drop
/// of its messages, are not.
///
/// The column is added without a default (no rewrite), the rows that
/// carry messages marked in the migration's transaction (one pass over the
/// table), the index built; the finish function is replaced and bound to
/// the schema again. A claim of a row whose life ended leaves its mark,
/// which the next completion sets: a sweep asks for Completed rows.
fn v6(schema: &Schema) -> Result<String> {
    let marked = super::statements::STAGED_ANSWER;
    let finish = v6_finish().ok_or_else(|| protocol("version 6: version 4's finish"))?;
    Ok(format!(
        "ALTER TABLE idempo_store ADD COLUMN IF NOT EXISTS staged boolean;
        UPDATE idempo_store SET staged = true WHERE state = 'C' AND {marked};
        CREATE INDEX IF NOT EXISTS idempo_store_staged ON idempo_store (scope, key) WHERE staged;
        {finish}
        {}",
        v3(schema)
    ))
}

/// The finish of version 4 (its text, taken from [`V4`]), marking a
/// completion whose response carries staged messages; `None` if version
/// 4's text does not read as expected (a test holds it).
fn v6_finish() -> Option<String> {
    let start = V4.find("CREATE OR REPLACE FUNCTION idemkv_finish(")?;
    let length = V4[start..].find("END $$;")? + "END $$;".len();
    let set = "reap_at = greatest(reap_at, v_now + ttl)";
    let marked = super::statements::STAGED_ANSWER.replace("response", "p_response");
    let staged = format!("{set},\n            staged = CASE WHEN p_kind = 'C' AND {marked} THEN true END");
    let finish = &V4[start..start + length];
    finish.contains(set).then(|| finish.replace(set, &staged))
}

/// Migration `version` for `schema`.
pub(super) fn migration(version: i32, schema: &Schema) -> Result<Cow<'static, str>> {
    match version {
        1 => Ok(Cow::Borrowed(V1)),
        2 => Ok(Cow::Borrowed(V2)),
        3 => Ok(Cow::Owned(v3(schema))),
        4 => Ok(Cow::Owned(v4(schema))),
        5 => Ok(Cow::Owned(super::keyspace::migration("idempo_store"))),
        6 => v6(schema).map(Cow::Owned),
        _ => Err(protocol("schema version")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_6_marks_a_staged_completion_in_version_4s_finish() {
        let finish = v6_finish().expect("version 4's finish");
        assert!(finish.starts_with("CREATE OR REPLACE FUNCTION idemkv_finish(") && finish.ends_with("END $$;"));
        assert!(finish.contains(
            "reap_at = greatest(reap_at, v_now + ttl),\n            \
             staged = CASE WHEN p_kind = 'C' AND substr(p_response, 1, 8) = '\\x49444b564f423100'::bytea THEN true END"
        ));
        // The mark in hex is the envelope's.
        let hex: Vec<String> = crate::record::STAGED_MARK.iter().map(|byte| format!("{byte:02x}")).collect();
        assert!(super::super::statements::STAGED_ANSWER.contains(&hex.concat()));
        let sql = v6(&Schema::new("public").expect("schema")).expect("version 6");
        assert!(
            sql.contains("CREATE INDEX IF NOT EXISTS idempo_store_staged ON idempo_store (scope, key) WHERE staged")
        );
    }
}
