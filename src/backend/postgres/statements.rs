//! The SQL the backend sends, for one schema's store: the functions the
//! migration created, called with every name qualified, and the plain
//! statements of the two calls of every request (see the module docs of
//! [`super`]).

use super::options::Schema;

/// A response that carries staged messages: it starts with the outbox's
/// envelope mark ([`crate::record::STAGED_MARK`], in hex).
pub(super) const STAGED_ANSWER: &str = "substr(response, 1, 8) = '\\x49444b564f423100'::bytea";

/// The statements of one schema's store, every name qualified (see
/// [`Schema`]).
#[derive(Debug)]
pub(super) struct Statements {
    /// The claim's plain statement, with `idemkv_claim`'s seven columns:
    /// `A` (inserted), `R`, `M` or `I` answered from the row its snapshot
    /// holds, `S` for the function to decide; no row when the insert met
    /// a row its snapshot does not see (the function decides that too).
    pub(super) claim_fast: String,
    pub(super) claim: String,
    pub(super) finish: String,
    /// A completion or failure: `waited` when the token held the key, no
    /// row otherwise.
    pub(super) finish_fast: String,
    /// The wake-up of `(scope, key)`'s waiters.
    pub(super) notify: String,
    pub(super) renew: String,
    pub(super) checkpoint: String,
    pub(super) remove: String,
    pub(super) reap: String,
    pub(super) get: String,
    /// A compare-and-set of a live Completed row's response: a row when
    /// it replaced.
    pub(super) replace: String,
    /// A page of a scope's live records after a key (`NULL`: from the
    /// first), in key order: `get`'s columns, then the key. A range of the
    /// primary key whatever the plan (`key > ''` for the first page: no key
    /// is empty), never the scope's rows before the key.
    pub(super) scan: String,
    /// [`Statements::scan`] of the live Completed rows whose response
    /// carries staged messages: a range of the partial index of those rows
    /// (schema version 6), never the scope's other rows.
    pub(super) scan_staged: String,
    /// The server's time now, in ms since the epoch, as records' times
    /// are read.
    pub(super) now: String,
}

impl Statements {
    pub(super) fn of(schema: &Schema) -> Statements {
        let call = |function: &str, args: &str| format!("SELECT {}({args})", schema.object(function));
        let ms = schema.object("idemkv_ms");
        let table = schema.object("idempo_store");
        let tokens = schema.object("idemkv_tokens").replace('\'', "''");
        let page = page(&ms, &table);
        let staged_5 = STAGED_ANSWER.replace("response", "$5::bytea");
        let staged_4 = STAGED_ANSWER.replace("response", "$4::bytea");
        Statements {
            claim_fast: claim_fast(&table, &tokens),
            claim: format!(
                "SELECT o_answer, o_token, o_attempt, o_recovered, o_left_ms, o_response, o_checkpoint \
                 FROM {}($1, $2, $3, $4, $5, $6, $7)",
                schema.object("idemkv_claim")
            ),
            finish: call("idemkv_finish", "$1, $2, $3, $4, $5"),
            finish_fast: format!(
                "WITH now AS (SELECT pg_catalog.clock_timestamp() AS t) \
                 UPDATE {table} AS r SET state = $4, response = $5, updated_at = now.t, finished_at = now.t, \
                 expires_at = now.t + r.ttl, checkpoint = NULL, reap_at = GREATEST(r.reap_at, now.t + r.ttl), \
                 staged = CASE WHEN $4 = 'C' AND {staged_5} THEN true END \
                 FROM now WHERE r.scope = $1 AND r.key = $2 AND r.token = $3 AND r.state = 'P' \
                 AND r.expires_at > now.t RETURNING r.waited"
            ),
            notify: format!("SELECT pg_catalog.pg_notify('idemkv', {}($1, $2))", schema.object("idemkv_tag")),
            renew: call("idemkv_renew", "$1, $2, $3, $4"),
            checkpoint: call("idemkv_checkpoint", "$1, $2, $3, $4"),
            remove: call("idemkv_remove", "$1, $2"),
            reap: call("idemkv_reap", "$1"),
            get: format!(
                "SELECT state, fingerprint, token, attempt, recovered, {ms}(created_at), {ms}(updated_at), \
                 {ms}(CASE WHEN state = 'P' THEN lease_end ELSE expires_at END), response, checkpoint, {TTL_MS} \
                 FROM {} WHERE scope = $1 AND key = $2 AND expires_at > clock_timestamp()",
                schema.object("idempo_store")
            ),
            replace: format!(
                "WITH now AS (SELECT pg_catalog.clock_timestamp() AS t) \
                 UPDATE {table} AS r SET response = $4, updated_at = GREATEST(r.updated_at, now.t), \
                 expires_at = GREATEST(r.expires_at, now.t + r.ttl), reap_at = GREATEST(r.reap_at, now.t + r.ttl), \
                 staged = CASE WHEN {staged_4} THEN true END \
                 FROM now WHERE r.scope = $1 AND r.key = $2 AND r.state = 'C' AND r.response = $3 \
                 AND r.expires_at > now.t RETURNING true"
            ),
            scan: format!("{page} ORDER BY key LIMIT $3"),
            // Marked `staged`: the predicate of the partial index of schema
            // version 6, which the planner then reads; and still a
            // completion that carries messages.
            scan_staged: format!("{page} AND staged AND state = 'C' AND {STAGED_ANSWER} ORDER BY key LIMIT $3"),
            now: format!("SELECT {ms}(clock_timestamp())"),
        }
    }
}

/// A row's TTL, in whole ms: the `get` statement's last column.
const TTL_MS: &str = "(extract(epoch FROM ttl) * 1000)::bigint";

/// What a page's transaction sets first: the planner may not sort, so the
/// only plan left for `ORDER BY key` is the index read in its order, which
/// stops at the page's end (see `PostgresBackend::call_page`).
pub(super) const NO_SORT: &str = "SET LOCAL enable_sort = off";

/// The start of a page's statement: `get`'s columns, then the key, of the
/// live rows of scope `$1` after key `$2` (`NULL`: from the first).
fn page(ms: &str, table: &str) -> String {
    format!(
        "SELECT state, fingerprint, token, attempt, recovered, {ms}(created_at), {ms}(updated_at), \
         {ms}(CASE WHEN state = 'P' THEN lease_end ELSE expires_at END), response, checkpoint, {TTL_MS}, key \
         FROM {table} WHERE scope = $1 AND key > coalesce($2::bytea, '\\x'::bytea) \
         AND expires_at > clock_timestamp()"
    )
}

/// The claim's plain statement (see [`Statements::claim_fast`]) on
/// `table`, drawing tokens from the sequence `tokens` (quoted for a
/// string).
fn claim_fast(table: &str, tokens: &str) -> String {
    format!(
        "WITH now AS (SELECT pg_catalog.clock_timestamp() AS t), \
         old AS (SELECT * FROM {table} WHERE scope = $1::bytea AND key = $2::bytea), \
         ins AS (INSERT INTO {table} (scope, key, fingerprint, state, token, attempt, recovered, waited, \
           lease_end, ttl, response, created_at, updated_at, finished_at, expires_at, checkpoint, reap_at) \
           SELECT $1, $2, $3::bytea, 'P', pg_catalog.nextval('{tokens}'), 1, false, false, \
           t + $4::bigint * interval '1 millisecond', $5::bigint * interval '1 millisecond', '', t, t, NULL, \
           t + ($4::bigint + $5::bigint) * interval '1 millisecond', NULL, \
           t + ($4::bigint + $5::bigint) * interval '1 millisecond' FROM now WHERE NOT EXISTS (SELECT FROM old) \
           ON CONFLICT (scope, key) DO NOTHING RETURNING token) \
         SELECT 'A'::text, token, 1, false, NULL::bigint, NULL::bytea, NULL::bytea FROM ins \
         UNION ALL \
         SELECT CASE \
           WHEN r.expires_at <= now.t THEN 'S' \
           WHEN r.fingerprint <> $3 THEN 'M' \
           WHEN r.state = 'C' OR (r.state = 'F' AND $7::text <> 'retry') THEN 'R' \
           WHEN r.state = 'P' AND r.lease_end > now.t AND (r.waited OR NOT $6::boolean) THEN 'I' \
           ELSE 'S' END, \
           NULL::bigint, r.attempt, NULL::boolean, \
           GREATEST(pg_catalog.ceil(pg_catalog.date_part('epoch', r.lease_end - now.t) * 1000), 0)::bigint, \
           r.response, NULL::bytea \
         FROM old r, now"
    )
}
