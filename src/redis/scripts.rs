//! The Lua scripts behind every transition: one script, one round trip,
//! run by SHA (`EVALSHA`, loaded again on `NOSCRIPT` by the client).
//!
//! Every script touches only the two keys of one `(scope, key)` — the
//! record hash and its token counter — and publishes on that key's channel,
//! all three under one hash tag, so one Cluster slot. Time is the server's
//! (`TIME`), never the client's. Numbers are written with `%.0f`: Lua's
//! numbers are doubles, exact for the integers used here (microseconds
//! since the epoch are about 2^51), and its default `%.14g` would round
//! them.
//!
//! The record hash: `st` state (`P`, `C`, `F`), `fp` fingerprint, `a`
//! attempt, `rc` recovered (0/1), `t` token, `c` created ms, `u` updated ms,
//! `le` lease end (Processing) or expiry (finished) ms, `tt` TTL ms, `s`
//! scope, `k` key, `r` response. Its `PEXPIRE` is lease end + TTL while
//! Processing (an abandoned claim expires as on the embedded store), the
//! TTL once finished: Redis's own expiry removes it.
//!
//! Fencing tokens: `max(last + 1, now in µs)`, `last` kept in the counter
//! key, which outlives the record by `keep` (an hour by default). While
//! the counter lives, tokens of the key grow whatever the clock does; once
//! it has expired, a new token is the server's time in µs, above every
//! earlier token of the key as long as the server clock (across restarts
//! and failovers) never goes back by more than `keep`.

/// Claim. KEYS: record, counter. ARGV: scope, key, fingerprint, lease ms,
/// TTL ms, keep ms. Replies `{'A', token, attempt, recovered, lease end}`,
/// `{'R', state, response}`, `{'I', ms left, attempt}`, `{'M'}`, or
/// `{'X'}` when the record names another `(scope, key)` (a hash collision).
pub(super) const CLAIM: &str = r"
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now = math.floor(now_us / 1000)
local lease = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local f = redis.call('HMGET', KEYS[1], 'st', 'fp', 'le', 'a', 's', 'k', 'r', 'c')
local attempt, recovered, created = 1, 0, now
if f[1] then
  if f[5] ~= ARGV[1] or f[6] ~= ARGV[2] then return {'X'} end
  if f[2] ~= ARGV[3] then return {'M'} end
  if f[1] ~= 'P' then return {'R', f[1], f[7] or ''} end
  local lease_end = tonumber(f[3])
  if lease_end > now then return {'I', string.format('%.0f', lease_end - now), f[4]} end
  attempt = tonumber(f[4]) + 1
  recovered = 1
  created = tonumber(f[8])
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = string.format('%.0f', math.max(last + 1, now_us))
local lease_end = string.format('%.0f', now + lease)
redis.call('HSET', KEYS[1], 'st', 'P', 'fp', ARGV[3], 'a', attempt, 'rc', recovered, 't', token,
  'c', string.format('%.0f', created), 'u', string.format('%.0f', now), 'le', lease_end, 'tt', ARGV[5],
  's', ARGV[1], 'k', ARGV[2])
redis.call('PEXPIRE', KEYS[1], lease + ttl)
redis.call('SET', KEYS[2], token, 'PX', lease + ttl + tonumber(ARGV[6]))
return {'A', token, attempt, recovered, lease_end}
";

/// Complete (`C`), fail (`F`) or release (`D`, the record is deleted).
/// KEYS: record, counter. ARGV: scope, key, token, kind, response,
/// channel, publish command, keep ms. Replies 1, or 0 when the token no
/// longer holds the key.
pub(super) const FINISH: &str = r"
local f = redis.call('HMGET', KEYS[1], 'st', 't', 'tt', 's', 'k', 'le')
if f[1] ~= 'P' or f[2] ~= ARGV[3] or f[4] ~= ARGV[1] or f[5] ~= ARGV[2] then return 0 end
if ARGV[4] == 'D' then
  redis.call('DEL', KEYS[1])
else
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local ttl = tonumber(f[3])
  redis.call('HSET', KEYS[1], 'st', ARGV[4], 'r', ARGV[5], 'u', string.format('%.0f', now),
    'le', string.format('%.0f', now + ttl))
  redis.call('PEXPIRE', KEYS[1], ttl)
  -- The counter expires at lease end + TTL + keep (set by claim and
  -- renew): within the lease it already outlives the record by keep.
  if now > tonumber(f[6]) then
    redis.call('PEXPIRE', KEYS[2], ttl + tonumber(ARGV[8]))
  end
end
redis.call(ARGV[7], ARGV[6], ARGV[4])
return 1
";

/// Renew: the lease ends at least `extend` from now. KEYS: record,
/// counter. ARGV: scope, key, token, extend ms, keep ms. Replies
/// `{1, lease end}`, or `{0}` when the token no longer holds the key.
pub(super) const RENEW: &str = r"
local f = redis.call('HMGET', KEYS[1], 'st', 't', 'tt', 's', 'k', 'le')
if f[1] ~= 'P' or f[2] ~= ARGV[3] or f[4] ~= ARGV[1] or f[5] ~= ARGV[2] then return {0} end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease_end = math.max(tonumber(f[6]), now + tonumber(ARGV[4]))
local ttl = tonumber(f[3])
redis.call('HSET', KEYS[1], 'le', string.format('%.0f', lease_end), 'u', string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[1], lease_end - now + ttl)
redis.call('PEXPIRE', KEYS[2], lease_end - now + ttl + tonumber(ARGV[5]))
return {1, string.format('%.0f', lease_end)}
";

/// Remove whatever the state. KEYS: record. ARGV: scope, key, channel,
/// publish command. Replies 1 (removed), 0 (absent) or -1 (the record
/// names another `(scope, key)`).
pub(super) const REMOVE: &str = r"
local f = redis.call('HMGET', KEYS[1], 's', 'k')
if not f[1] then return 0 end
if f[1] ~= ARGV[1] or f[2] ~= ARGV[2] then return -1 end
redis.call('DEL', KEYS[1])
redis.call(ARGV[4], ARGV[3], 'D')
return 1
";
