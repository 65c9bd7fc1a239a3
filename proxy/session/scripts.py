"""The Lua scripts of the Redis store: each loads, commits or admits one session atomically.

Kept apart from :mod:`proxy.session.redis` (which calls them) because they are a program of
their own, in another language: one place to read what Redis does with a session's hash.
"""

from proxy.session.base import FIELDS
from proxy.session.timeline import SUMMARY_FIELDS

__all__ = [
    "ADMIT",
    "ADMIT_WINDOW",
    "CLAIM",
    "CLAIM_IF_FREE",
    "COMMIT",
    "DONE",
    "EPOCH",
    "GRANT",
    "INDEX",
    "LIST",
    "LIST_SESSION",
    "LOAD",
    "ONCE",
    "TIMELINE",
]

# Every script is idempotent: KEYS[2] is a short-lived marker for this operation (same hash
# tag as the data, so the script stays on one Cluster node), set once it changed something.
# A call retried after a connection broke mid-reply finds its marker and changes nothing
# twice; a refused admission sets no marker, so its retry is judged afresh.
ONCE = "if redis.call('EXISTS', KEYS[2]) == 1 then return {} end\n"
# Every script starts here: the last key is the sentinel of the data's scope, the last
# argument a fresh epoch to create it with when it is missing; the epoch is returned first.
EPOCH = (
    "local epoch = redis.call('GET', KEYS[#KEYS])\n"
    "if not epoch then epoch = ARGV[#ARGV]; redis.call('SET', KEYS[#KEYS], epoch) end\n"
)
# KEYS[1] = session hash, KEYS[2] = sentinel. ARGV[1] = candidate epoch.
LOAD = EPOCH + "return {epoch, redis.call('HGETALL', KEYS[1])}\n"
# KEYS[1] = a record (no session: no epoch, no marker; setting it twice changes nothing twice).
# ARGV[1] = its TTL in seconds, then field, value pairs.
RECORD = "redis.call('HSET', KEYS[1], unpack(ARGV, 2))\nredis.call('EXPIRE', KEYS[1], ARGV[1])\nreturn 1\n"
DONE = "redis.call('SET', KEYS[2], '1', 'EX', 300)\n"

# The session put first in its namespace's index, KEYS[4] and KEYS[5], as INDEX does it (see
# there); the summary is the hash's non-empty summary fields and ``expires_ms``. A session
# listed less than a second ago is listed again only when it ends (a busy session's commits do
# not each rewrite the index; its place and counters lag by a second at most). Returns the
# sessions unlisted over the cap, or -1 when the index keys hold something else, and the
# session's HGETALL when it read it (else nil).
LIST_SESSION = (
    f"""
local LIST_EVERY_MS = 1000
local LAST_SEEN_MS, LAST_SEEN = '{FIELDS.LAST_SEEN_MS}', '{FIELDS.LAST_SEEN}'
local TIMELINE_TOTAL, TIMELINE_DROPPED = '{FIELDS.TIMELINE_TOTAL}', '{FIELDS.TIMELINE_DROPPED}'
local TERMINATION = '{FIELDS.TERMINATION}'"""
    + """
local function list_session(all, d)
  local listed = redis.pcall('ZSCORE', KEYS[4], d[11])
  if type(listed) == 'string' and d[5][TERMINATION] == nil then
    local now = tonumber(redis.call('HGET', KEYS[1], LAST_SEEN_MS) or '0') or 0
    if now - tonumber(listed) < LIST_EVERY_MS then return 0, all end
  end
  all = all or redis.call('HGETALL', KEYS[1])
  local h = {}
  for j = 1, #all, 2 do h[all[j]] = all[j + 1] end
  local seen = tonumber(h[LAST_SEEN_MS] or '0') or 0
  if seen == 0 then seen = (tonumber(h[LAST_SEEN] or '0') or 0) * 1000 end
  local shown = {}
  for _, f in ipairs("""
    + "{"
    + ", ".join(f"'{name}'" for name in SUMMARY_FIELDS)
    + "}"
    + """) do
    if h[f] and h[f] ~= '' then shown[f] = h[f] end
  end
  shown['expires_ms'] = seen + d[1]
  local added = redis.pcall('ZADD', KEYS[4], seen, d[11])  -- the index is derived: a broken one
  if type(added) == 'table' and added.err then return -1, all end  -- is reported, the commit stands
  local kind = redis.call('TYPE', KEYS[5]).ok
  if kind ~= 'hash' and kind ~= 'none' then return -1, all end
  redis.call('HSET', KEYS[5], d[11], cjson.encode(shown))
  local over = redis.call('ZCARD', KEYS[4]) - d[12]
  if over > 0 then
    redis.call('HDEL', KEYS[5], unpack(redis.call('ZRANGE', KEYS[4], 0, over - 1)))
    redis.call('ZREMRANGEBYRANK', KEYS[4], 0, over - 1)
  else
    over = 0
  end
  redis.call('PEXPIRE', KEYS[4], d[1])
  redis.call('PEXPIRE', KEYS[5], d[1])
  return over, all
end
"""
)

# KEYS[1] = session hash, KEYS[3] = its timeline (a list). ARGV[1] = the delta as JSON (see
# ``redis_lists.packed_delta``): [ttl_ms, replace (0|1), the reservation fields' prefix,
# {defaults}, {assignments}, {increments}, [[field, keep, items (comma-joined)], ...],
# [[kind, at_ms, {fields}], ...], timeline cap, whether to answer with the state (0|1), and for
# a single server (no Cluster slots to keep to) the session's id and the index cap]; one
# argument, so neither side encodes or parses dozens of small ones. Events are stored as cjson
# writes them back. Assignments go in one HSET (and one HDEL).
# Events are pushed and the list trimmed to the cap in the same step, the overflow counted in
# the hash; the list's TTL follows the hash's. With KEYS[4], KEYS[5] (the namespace's index and
# summaries, see INDEX) the session is listed in the same step too. A hash left with nothing
# but zero reservations is deleted (looked for only when the delta wrote nothing else). Returns
# {epoch, HGETALL (empty unless asked for), events dropped, sessions unlisted}; the hash is read
# only where it is needed (listing, the answer, the look for a hash of reservations only).
COMMIT = (
    EPOCH
    + ONCE.replace("{}", "{epoch, redis.call('HGETALL', KEYS[1]), 0, 0}")
    + DONE
    + """
local key = KEYS[1]
local d = cjson.decode(ARGV[1])
local prefix = d[3]
"""
    + LIST_SESSION
    + """
if d[2] == 1 then redis.call('DEL', key, KEYS[3]) end
local dropped = 0
local events = d[8]
if #events > 0 then
  local encoded = {}
  for i, event in ipairs(events) do encoded[i] = cjson.encode(event) end
  local kept = redis.call('RPUSH', KEYS[3], unpack(encoded))
  local total = redis.call('HINCRBY', key, TIMELINE_TOTAL, #events)
  if kept > total then  -- the hash was started afresh (an admission that replaced it): so is the list
    redis.call('LTRIM', KEYS[3], kept - total, -1)
    kept = total
  end
  if kept > d[9] then
    dropped = kept - d[9]
    redis.call('LTRIM', KEYS[3], dropped, -1)
    redis.call('HINCRBY', key, TIMELINE_DROPPED, dropped)
  end
end
local other = #events > 0  -- the hash now holds a field that is no zero reservation (timeline_total here)
local function keeps(field, value) return string.sub(field, 1, #prefix) ~= prefix or tonumber(value) ~= 0 end
for field, value in pairs(d[4]) do
  redis.call('HSETNX', key, field, value)
  other = other or keeps(field, value)
end
local set, gone = {}, {}
for field, value in pairs(d[5]) do
  if value == '' then
    gone[#gone + 1] = field
  else
    set[#set + 1] = field; set[#set + 1] = value
    other = other or keeps(field, value)
  end
end
if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
if #set > 0 then redis.call('HSET', key, unpack(set)) end
for field, by in pairs(d[6]) do redis.call('HINCRBY', key, field, by) end
for _, append in ipairs(d[7]) do
  local field, keep, added = append[1], append[2], append[3]
  local old = redis.call('HGET', key, field)
  local list = (old and old ~= '') and (old .. ',' .. added) or added
  local _, commas = string.gsub(list, ',', '')
  while commas >= keep do
    list = string.sub(list, string.find(list, ',', 1, true) + 1); commas = commas - 1
  end
  redis.call('HSET', key, field, list)
  other = other or keeps(field, list)
end
local all = nil
if not other then  -- only counters written: is anything but reservations given back left?
  all = redis.call('HGETALL', key)
  for j = 1, #all, 2 do
    if string.sub(all[j], 1, #prefix) ~= prefix or tonumber(all[j + 1]) ~= 0 then other = true; break end
  end
end
if not other then
  redis.call('DEL', key, KEYS[3])  -- nothing but reservations given back: a session that never was
  return {epoch, {}, 0, 0}
end
redis.call('PEXPIRE', key, d[1])
redis.call('PEXPIRE', KEYS[3], d[1])
local unlisted = 0
if #KEYS == 6 then unlisted, all = list_session(all, d) end
if d[10] == 1 then all = all or redis.call('HGETALL', key) else all = {} end
return {epoch, all, dropped, unlisted}
"""
)

# KEYS[1] = a namespace's index (sorted set: session id by last seen ms), KEYS[2] = its
# summaries (hash: session id → JSON). ARGV = session id, last seen ms, summary, cap, ttl_ms.
# Written after the session's commit (on a Cluster the session's slot is another one); the
# least recently seen over the cap go. Returns how many went.
INDEX = """
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[4])
if over > 0 then
  local gone = redis.call('ZRANGE', KEYS[1], 0, over - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, over - 1)
  redis.call('HDEL', KEYS[2], unpack(gone))
else
  over = 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return over
"""

# KEYS as INDEX's. ARGV = highest last seen ms (inclusive; '+inf' for the newest), offset, count.
# Returns {id, last seen ms, summary, ...}, newest first (ties by id, descending).
LIST = """
local found = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '-inf', 'WITHSCORES', 'LIMIT', ARGV[2], ARGV[3])
local out = {}
for i = 1, #found, 2 do
  out[#out + 1] = found[i]
  out[#out + 1] = found[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], found[i]) or ''
end
return out
"""

# KEYS[1] = session hash, KEYS[2] = its timeline. ARGV = first event number, count, total field,
# dropped field. Returns {total, dropped, number of the first returned, events...}: read in
# one step, so the numbers match the events even while commits push older ones out.
TIMELINE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'0', '0', '0'} end
local total = tonumber(redis.call('HGET', KEYS[1], ARGV[3]) or '0') or 0
local dropped = redis.call('HGET', KEYS[1], ARGV[4]) or '0'
local start = total - redis.call('LLEN', KEYS[2])
local skip = math.max(0, tonumber(ARGV[1]) - start)
local out = {tostring(total), dropped, tostring(start + skip)}
for _, event in ipairs(redis.call('LRANGE', KEYS[2], skip, skip + tonumber(ARGV[2]) - 1)) do
  out[#out + 1] = event
end
return out
"""


# Claims the ending (see ``Claim``) unless one is stored or another claim is live. Needs ``key``,
# ``now`` (ms), ``lease`` (ms), ``ending`` and ``claim`` (the two field names) in scope.
CLAIM_IF_FREE = """
local function claim_if_free()
  local stored = redis.call('HGET', key, ending)
  local held = tonumber(redis.call('HGET', key, claim) or '0') or 0
  if (stored and stored ~= '') or held > now then return false end
  redis.call('HSET', key, claim, tostring(now + lease))
  return true
end
"""

# KEYS[1] = session hash. ARGV[1] = the admission as JSON: [ttl_ms, replace (0|1), claim now_ms
# (0: no claim), lease_ms, ending field, claim field, [[name, reserved field, amount, limit,
# [used fields...]], ...]]; ARGV[2] = the epoch. Reserves all or nothing; a refusal claims the
# ending when asked to (the hash read once, before). Returns {epoch, refused name or '', '1' when
# claimed or '', HGETALL}. The
# op marker holds the outcome ('1': admitted, else the refused limit that claimed), so a retry
# answers the same.
ADMIT = (
    EPOCH
    + """
local key = KEYS[1]
local done = redis.call('GET', KEYS[2])
if done then
  if done == '1' then return {epoch, '', '', redis.call('HGETALL', key)} end
  return {epoch, done, '1', redis.call('HGETALL', key)}
end
local a = cjson.decode(ARGV[1])
local now, lease, ending, claim = a[3], a[4], a[5], a[6]
"""
    + CLAIM_IF_FREE
    + """
if a[2] == 1 then redis.call('DEL', key) end
local all = redis.call('HGETALL', key)  -- read once: the limits' fields and the state returned
local h = {}
for j = 1, #all, 2 do h[all[j]] = all[j + 1] end
local function num(field) return tonumber(h[field] or '0') or 0 end
local taken = {}
for _, l in ipairs(a[7]) do
  local name, reserved, amount, limit = l[1], l[2], l[3], l[4]
  if l[6] and l[6] ~= '' then limit = limit + num(l[6]) end
  local used = num(reserved)
  for _, field in ipairs(l[5]) do used = used + num(field) end
  if used + amount > limit then
    if now > 0 and claim_if_free() then
      redis.call('SET', KEYS[2], name, 'EX', 300)
      redis.call('PEXPIRE', key, a[1])
      return {epoch, name, '1', redis.call('HGETALL', key)}
    end
    return {epoch, name, '', all}  -- nothing written: the hash as read
  end
  taken[#taken + 1] = {reserved, amount}
end
if #taken > 0 then
  for _, t in ipairs(taken) do h[t[1]] = string.format('%d', redis.call('HINCRBY', key, t[1], t[2])) end
  all = {}
  for field, value in pairs(h) do all[#all + 1] = field; all[#all + 1] = value end
end
redis.call('SET', KEYS[2], '1', 'EX', 300)
redis.call('PEXPIRE', key, a[1])
return {epoch, '', '', all}
"""
)

# KEYS[1] = session hash. ARGV = ttl_ms, now_ms, lease_ms, ending field, claim field, epoch.
# Returns {epoch, '1' when claimed or '', HGETALL}.
CLAIM = (
    EPOCH
    + ONCE.replace("{}", "{epoch, '1', redis.call('HGETALL', KEYS[1])}")
    + """
local key = KEYS[1]
local now, lease, ending, claim = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
"""
    + CLAIM_IF_FREE
    + """
if not claim_if_free() then return {epoch, '', redis.call('HGETALL', key)} end
redis.call('SET', KEYS[2], '1', 'EX', 300)
redis.call('PEXPIRE', key, ARGV[1])
return {epoch, '1', redis.call('HGETALL', key)}
"""
)

# KEYS[1] = window hash. ARGV = now, n_limits, then per limit:
# name, prefix, reserved field, amount, limit, window_secs, bucket_secs.
# Returns {refused name or '', retry_after seconds or '', HGETALL}.
ADMIT_WINDOW = (
    EPOCH
    + ONCE.replace("{}", "{epoch, '', '', redis.call('HGETALL', KEYS[1])}")
    + """
local key = KEYS[1]
local now = tonumber(ARGV[1])
local i, taken, longest = 3, {}, 60
for _ = 1, tonumber(ARGV[2]) do
  local name, prefix, reserved = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local amount, limit = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  local window, bucket_secs = tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
  i = i + 7
  if window + bucket_secs > longest then longest = window + bucket_secs end
  local slots = math.floor(window / bucket_secs)
  local oldest = math.floor(now / bucket_secs) - slots + 1
  local used = tonumber(redis.call('HGET', key, reserved) or '0') or 0
  local buckets = {}
  local all = redis.call('HGETALL', key)
  for j = 1, #all, 2 do
    if string.sub(all[j], 1, #prefix) == prefix then
      local b = tonumber(string.sub(all[j], #prefix + 1))
      if b ~= nil then
        if b < oldest then redis.call('HDEL', key, all[j])
        else
          local v = tonumber(all[j + 1]) or 0
          used = used + v
          buckets[#buckets + 1] = {b, v}
        end
      end
    end
  end
  if used + amount > limit then
    table.sort(buckets, function(x, y) return x[1] < y[1] end)
    local freed = 0
    for _, bv in ipairs(buckets) do
      freed = freed + bv[2]
      if used - freed + amount <= limit then
        local wait = math.max(1, math.ceil((bv[1] + slots) * bucket_secs - now))
        return {epoch, name, tostring(wait), redis.call('HGETALL', key)}
      end
    end
    return {epoch, name, tostring(window), redis.call('HGETALL', key)}
  end
  taken[#taken + 1] = {reserved, amount}
end
for _, t in ipairs(taken) do redis.call('HINCRBY', key, t[1], t[2]) end
redis.call('SET', KEYS[2], '1', 'EX', 300)
redis.call('EXPIRE', key, longest)
return {epoch, '', '', redis.call('HGETALL', key)}
"""
)


# A grant is a commit with a check before it: KEYS and the arguments as COMMIT's, with one more
# just before the epoch (ARGV[#ARGV - 1], so COMMIT may grow arguments of its own): the grant as
# JSON, [[[budget, granted field, amount, ceiling], ...], [reasons to lift], [ending fields]].
# Refused (nothing changed, no marker set): {epoch, HGETALL, budget over its ceiling, or '' when
# there is no session}. Granted: an ending whose reason is lifted is cleared, then the delta is
# committed exactly as COMMIT commits it (so whatever a commit writes, a grant writes too).
_GRANT_CHECK = """
local g = cjson.decode(ARGV[#ARGV - 1])
if redis.call('EXISTS', KEYS[1]) == 0 then return {epoch, {}, ''} end
for _, grant in ipairs(g[1]) do
  local held = tonumber(redis.call('HGET', KEYS[1], grant[2]) or '0') or 0
  if held + grant[3] > grant[4] then return {epoch, redis.call('HGETALL', KEYS[1]), grant[1]} end
end
local reason = redis.call('HGET', KEYS[1], g[3][1])
for _, lifted in ipairs(g[2]) do
  if reason == lifted then
    for _, field in ipairs(g[3]) do redis.call('HDEL', KEYS[1], field) end
    break
  end
end
"""
GRANT = COMMIT.replace(DONE, _GRANT_CHECK + DONE, 1)
if GRANT == COMMIT:  # a change to COMMIT moved its marker: the check must find its place again
    raise RuntimeError("scripts.GRANT: COMMIT no longer sets its marker with DONE")
