//! The Lua scripts behind every transition: one script, one round trip,
//! run by SHA (`EVALSHA`, loaded again on `NOSCRIPT` by the client). The
//! claim of a fresh key, and a claim answered without a write, take the
//! fast path of [`super::fast`] instead.
//!
//! Every script touches the one key of its `(scope, key)` — the record —
//! and publishes on that key's channel, both under one hash tag, so one
//! Cluster slot; on a standalone server a script that writes the record
//! also files it in its scope's indexes (KEYS 2 to 4, see
//! [`super::index`]), which a Cluster does not keep. Time is the
//! server's (`TIME`), never the client's.
//! Numbers leave a script as `%.0f` strings: Lua's numbers are doubles,
//! exact for the integers used here (microseconds since the epoch are
//! about 2^51), and its default `%.14g` would round them.
//!
//! The record is one string, a `MessagePack` array (Redis's `cmsgpack`), so
//! that a claim or a finish is one `GET` and one `SET ... PX`: `[1]` state
//! (`P`, `C`, `F`, or `D` for released or removed), `[2]` fingerprint,
//! `[3]` attempt, `[4]` recovered (0/1), `[5]` token, `[6]` created ms,
//! `[7]` updated ms, `[8]` lease end (Processing) or expiry (finished) ms,
//! `[9]` TTL ms, `[10]` scope, `[11]` key, `[12]` response, `[13]` the
//! checkpoint while Processing (the bytes of
//! [`crate::checkpoint`]'s encoding; empty for none, and once finished),
//! `[14]` 1 once a waiting caller found the key in progress (its finish
//! then publishes; absent or 0 otherwise). A record written before `[13]`
//! or `[14]` existed reads as one without a checkpoint and without
//! waiters: nothing to migrate.
//!
//! `[15]` and `[16]` are only in a record the claim's fast path wrote
//! ([`super::fast`]): the `PX` it was written with, and its lease (ms).
//! That path writes a fresh key with a bare `SET … NX GET PX`, no script,
//! so it cannot put the server's time in the record: its `[5]`–`[7]` are
//! 0. The key's expiry, which the server set from its own clock, gives
//! them back: written at `at` = expiry − `[15]` (ms), the record's token
//! is `at` × 1000, created and updated are `at`, and the lease ends at
//! `at` + `[16]`. Every script settles such a record first (`settle`,
//! with `PEXPIRETIME`) and writes it back settled, without `[15]` and
//! `[16]`. Redis logs and replicates a `PX` as the absolute `PXAT`, so an
//! AOF replayed at a restart, or a promoted replica, gives the same times.
//! `[8]` of such a record is [`super::fast::FAR`], far beyond any clock,
//! for the scripts of an earlier build that share the server and do not
//! settle: they see the key in progress (never a lease to take over, so
//! never a second run) until the fast claimer finishes it, which writes
//! it settled.
//!
//! A finish publishes on the key's channel only when `[14]` says a waiter
//! is there: a waiting caller subscribes before the claim that marks the
//! record, so no finish after the mark goes unheard, and a finish before
//! it is seen by that claim. A takeover keeps the mark (the waiters of the
//! lost lease still wait); a record that starts afresh has none. A waiter
//! of an earlier build, which does not mark, is woken by its own polling
//! (at most a second) rather than by a publish.
//!
//! The checkpoint follows the lease: a renewal keeps it, a takeover of
//! an ended lease hands it to the new holder and keeps it in the record
//! (a second takeover still finds it), and every other claim that writes
//! (absent, expired, released, or a Failed key run again under
//! [`ReusePolicy::RetryFailed`](crate::ReusePolicy::RetryFailed)) starts
//! without one. Finishing or removing the key empties it.
//!
//! A record is **live** while Processing until lease end + TTL (an
//! abandoned claim expires as on the embedded store), while Completed or
//! Failed until its expiry, and never once released or removed. A record
//! that is not live is absent to every call, but Redis keeps it `keep`
//! longer (`PX` = its life + keep; an hour by default) for one reason: its
//! fencing token. A new token is `max(last + 1, now in µs)`, `last` read
//! from the record while Redis keeps it; once Redis has dropped it, a new
//! token is the server's time in µs, above every earlier token of the key
//! as long as the server clock (across restarts and failovers) never goes
//! back by more than `keep` (a fast claim's token, the server's time in
//! ms × 1000, too: the key is absent). Redis's own expiry removes it: no
//! reaper.

/// The start of every script: whether record `r` is live at `now` (see the
/// module docs), and the server's time.
macro_rules! live {
    () => {
        r"
local function live(r, now)
  if r[1] == 'P' then return r[8] + r[9] > now end
  if r[1] == 'D' then return false end
  return r[8] > now
end
-- A record the claim's fast path wrote (see the module docs) takes its
-- times from the key's expiry, which its PX, r[15], set; r[16] is its
-- lease.
local function settle(r, name)
  if r[15] then
    local at = redis.call('PEXPIRETIME', name or KEYS[1]) - r[15]
    r[5], r[6], r[7], r[8] = at * 1000, at, at, at + r[16]
    r[15], r[16] = nil, nil
  end
  return r
end
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now = math.floor(now_us / 1000)
-- The scope's indexes (see `super::index`), on a standalone server only:
-- KEYS[2] its keys (score 0), KEYS[3] the same scored by a bound of when
-- each record stops being live, KEYS[4] those whose completion carries
-- staged messages.
local function life_end(r)
  if r[1] == 'P' then return r[8] + r[9] end
  if r[1] == 'D' then return 0 end
  return r[8]
end
local function unfile(key)
  redis.call('ZREM', KEYS[2], key)
  redis.call('ZREM', KEYS[3], key)
  redis.call('ZREM', KEYS[4], key)
end
-- Files the record `r` of `key`, just written. Its bound only grows
-- (`GT`: a completion within its lease leaves the claim's), so it stays at
-- or after the record's end; a key new to the bounds (claimed by the fast
-- path, which files the key alone) goes into the keys too, in case it
-- left them meanwhile. `anew`: a record written afresh or an answer
-- replaced, whose key's earlier staged entry goes unless it is staged now.
local function file(key, r, anew)
  if not KEYS[2] then return end
  local ends = life_end(r)
  if ends <= now then return unfile(key) end
  if redis.call('ZADD', KEYS[3], 'GT', string.format('%.0f', ends), key) == 1 or anew then
    redis.call('ZADD', KEYS[2], 0, key)
  end
  if r[1] == 'C' and string.sub(r[12], 1, 8) == 'IDKVOB1\0' then
    redis.call('ZADD', KEYS[4], 0, key)
  elseif anew then
    redis.call('ZREM', KEYS[4], key)
  end
end
-- Drops two keys whose bound has passed: their records have ended.
local function unfile_ended()
  if not KEYS[2] then return end
  for _, gone in ipairs(redis.call('ZRANGE', KEYS[3], 1, now, 'BYSCORE', 'LIMIT', 0, 2)) do
    unfile(gone)
  end
end
"
    };
}

/// Claim. KEYS: record. ARGV: scope, key, fingerprint, lease ms, TTL ms,
/// keep ms, reuse policy (`retry` runs a Failed key again, anything else
/// replays its failure), `1` for a waiting caller (marks a record in
/// progress for its finish to publish). Replies `{'A', token, attempt, recovered, lease
/// end, checkpoint}`, `{'R', state, response}`, `{'I', ms left,
/// attempt}`, `{'M'}`, or `{'X'}` when the record names another `(scope,
/// key)` (a hash collision).
pub(super) const CLAIM: &str = concat!(
    live!(),
    r"
local lease = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local packed = redis.call('GET', KEYS[1])
local attempt, recovered, created, last, point, waited = 1, 0, now, 0, '', 0
if packed then
  local r = settle(cmsgpack.unpack(packed))
  if r[10] ~= ARGV[1] or r[11] ~= ARGV[2] then return {'X'} end
  last = r[5]
  if live(r, now) then
    if r[2] ~= ARGV[3] then return {'M'} end
    if r[1] == 'F' and ARGV[7] == 'retry' then
      attempt = r[3] + 1
    elseif r[1] ~= 'P' then
      return {'R', r[1], r[12]}
    elseif r[8] > now then
      if ARGV[8] == '1' and r[14] ~= 1 then
        r[14] = 1
        redis.call('SET', KEYS[1], cmsgpack.pack(r), 'KEEPTTL')
      end
      return {'I', string.format('%.0f', r[8] - now), r[3]}
    else
      attempt = r[3] + 1
      recovered = 1
      created = r[6]
      point = r[13] or ''
      waited = r[14] or 0
    end
  end
end
local token = math.max(last + 1, now_us)
local lease_end = now + lease
local r = {'P', ARGV[3], attempt, recovered, token, created, now, lease_end, ttl, ARGV[1], ARGV[2], '', point, waited}
redis.call('SET', KEYS[1], cmsgpack.pack(r), 'PX', lease + ttl + tonumber(ARGV[6]))
file(ARGV[2], r, true)
return {'A', string.format('%.0f', token), attempt, recovered, string.format('%.0f', lease_end), point}
"
);

/// Complete (`C`), fail (`F`) or release (`D`), publishing when a waiter
/// marked the record, on the key's channel (the record's name ending `w`
/// for `r`, made here: a finish that publishes is rare, and the name
/// would cost every call its bytes). KEYS: record. ARGV: scope, key,
/// token, kind, response, publish command, keep ms. Replies 1, or 0 when
/// the token no longer holds the key.
pub(super) const FINISH: &str = concat!(
    live!(),
    r"
local packed = redis.call('GET', KEYS[1])
if not packed then return 0 end
local r = settle(cmsgpack.unpack(packed))
if r[1] ~= 'P' or r[5] ~= tonumber(ARGV[3]) or r[10] ~= ARGV[1] or r[11] ~= ARGV[2] or not live(r, now) then
  return 0
end
local keep = tonumber(ARGV[7])
if ARGV[4] == 'D' then
  r[1], r[7], r[8], r[12], r[13] = 'D', now, 0, '', ''
  redis.call('SET', KEYS[1], cmsgpack.pack(r), 'PX', keep)
else
  r[1], r[7], r[8], r[12], r[13] = ARGV[4], now, now + r[9], ARGV[5], ''
  redis.call('SET', KEYS[1], cmsgpack.pack(r), 'PX', r[9] + keep)
end
file(ARGV[2], r, false)
unfile_ended()
if r[14] == 1 then redis.call(ARGV[6], string.sub(KEYS[1], 1, -2) .. 'w', ARGV[4]) end
return 1
"
);

/// Renew: the lease ends at least `extend` from now. KEYS: record. ARGV:
/// scope, key, token, extend ms, keep ms. Replies `{1, lease end}`, or
/// `{0}` when the token no longer holds the key.
pub(super) const RENEW: &str = concat!(
    live!(),
    r"
local packed = redis.call('GET', KEYS[1])
if not packed then return {0} end
local r = settle(cmsgpack.unpack(packed))
if r[1] ~= 'P' or r[5] ~= tonumber(ARGV[3]) or r[10] ~= ARGV[1] or r[11] ~= ARGV[2] or not live(r, now) then
  return {0}
end
r[8] = math.max(r[8], now + tonumber(ARGV[4]))
r[7] = now
redis.call('SET', KEYS[1], cmsgpack.pack(r), 'PX', r[8] - now + r[9] + tonumber(ARGV[5]))
file(ARGV[2], r, false)
return {1, string.format('%.0f', r[8])}
"
);

/// Checkpoint: the checkpoint of the lease becomes ARGV[4]; its end
/// stays. KEYS: record. ARGV: scope, key, token, encoded checkpoint,
/// keep ms. Replies 1, or 0 when the token no longer holds the key (the
/// same checks as a renewal).
pub(super) const CHECKPOINT: &str = concat!(
    live!(),
    r"
local packed = redis.call('GET', KEYS[1])
if not packed then return 0 end
local r = settle(cmsgpack.unpack(packed))
if r[1] ~= 'P' or r[5] ~= tonumber(ARGV[3]) or r[10] ~= ARGV[1] or r[11] ~= ARGV[2] or not live(r, now) then
  return 0
end
r[7], r[13] = now, ARGV[4]
redis.call('SET', KEYS[1], cmsgpack.pack(r), 'PX', r[8] + r[9] - now + tonumber(ARGV[5]))
file(ARGV[2], r, false)
return 1
"
);

/// Remove whatever the state: the record becomes `D` (absent) and is kept
/// `keep` for its token. KEYS: record. ARGV: scope, key, channel, publish
/// command, keep ms. Replies 1 (removed), 0 (absent) or -1 (the record
/// names another `(scope, key)`).
pub(super) const REMOVE: &str = concat!(
    live!(),
    r"
local packed = redis.call('GET', KEYS[1])
if not packed then return 0 end
local r = settle(cmsgpack.unpack(packed))
if r[10] ~= ARGV[1] or r[11] ~= ARGV[2] then return -1 end
if not live(r, now) then return 0 end
r[1], r[7], r[8], r[12], r[13] = 'D', now, 0, '', ''
redis.call('SET', KEYS[1], cmsgpack.pack(r), 'PX', tonumber(ARGV[5]))
file(ARGV[2], r, false)
redis.call(ARGV[4], ARGV[3], 'D')
return 1
"
);

/// Compare-and-set of a Completed record's response: the record as it
/// was but for its response, its last change, and its expiry, at least
/// its TTL from now. KEYS: record. ARGV: scope, key, expected response,
/// new response, keep ms.
/// Replies 1 (replaced), 0 (absent, not Completed, or another response) or
/// -1 (the record names another `(scope, key)`).
pub(super) const REPLACE: &str = concat!(
    live!(),
    r"
local packed = redis.call('GET', KEYS[1])
if not packed then return 0 end
local r = settle(cmsgpack.unpack(packed))
if r[10] ~= ARGV[1] or r[11] ~= ARGV[2] then return -1 end
if r[1] ~= 'C' or not live(r, now) or r[12] ~= ARGV[3] then return 0 end
r[7], r[8], r[12] = math.max(now, r[7]), math.max(r[8], now + r[9]), ARGV[4]
redis.call('SET', KEYS[1], cmsgpack.pack(r), 'PX', r[8] - now + tonumber(ARGV[5]))
file(ARGV[2], r, true)
return 1
"
);

/// Read. KEYS: record. Replies the live record's thirteen fields in order
/// (an empty checkpoint for a record written without one), numbers as
/// decimal strings, or an empty array when it is absent.
pub(super) const GET: &str = concat!(
    live!(),
    r"
local packed = redis.call('GET', KEYS[1])
if not packed then return {} end
local r = settle(cmsgpack.unpack(packed))
if not live(r, now) then return {} end
for i = 3, 9 do r[i] = string.format('%.0f', r[i]) end
r[13] = r[13] or ''
r[14] = nil
return r
"
);

/// A page of a scope's records, from its index (see [`super::index`]):
/// KEYS the index's keys, ends and staged keys, then one record per key;
/// ARGV the scope, `1` for Completed records with staged messages only,
/// then the keys. Replies the thirteen fields of [`GET`] for each live
/// record (one after another); drops from the indexes every key whose
/// record is not live (and from the staged keys one whose completion
/// carries no staged messages), in the same step as it reads.
pub(super) const PAGE: &str = concat!(
    live!(),
    r"
local out = {}
for i = 3, #ARGV do
  local key, name = ARGV[i], KEYS[i + 1]
  local packed = redis.call('GET', name)
  local r = nil
  if packed then
    r = settle(cmsgpack.unpack(packed), name)
    if r[10] ~= ARGV[1] or r[11] ~= key or not live(r, now) then r = nil end
  end
  if not r then
    redis.call('ZREM', KEYS[1], key)
    redis.call('ZREM', KEYS[2], key)
    redis.call('ZREM', KEYS[3], key)
  elseif ARGV[2] == '1' and not (r[1] == 'C' and string.sub(r[12], 1, 8) == 'IDKVOB1\0') then
    redis.call('ZREM', KEYS[3], key)
  else
    for f = 3, 9 do r[f] = string.format('%.0f', r[f]) end
    r[13] = r[13] or ''
    for f = 1, 13 do out[#out + 1] = r[f] end
  end
end
return out
"
);

/// Files a record written before the indexes in its scope's (the
/// indexes' migration, [`super::migrate`]). KEYS: record, then the scope's
/// indexes. ARGV: scope, key. Replies 1 when the live record was filed,
/// 0 when there is none (or it names another `(scope, key)`).
pub(super) const FILE: &str = concat!(
    live!(),
    r"
local packed = redis.call('GET', KEYS[1])
if not packed then return 0 end
local r = settle(cmsgpack.unpack(packed))
if r[10] ~= ARGV[1] or r[11] ~= ARGV[2] or not live(r, now) then return 0 end
file(ARGV[2], r, true)
return 1
"
);
