-- Sentinel concurrency lease: take, hand back, or count the leases of one bucket.
--
-- KEYS[1]   the bucket: a sorted set, members = lease names, scores = lease expiry
--           (unix microseconds by Redis TIME), always with a TTL (PEXPIRE).
-- KEYS[2]   the lease's name, spelled as a key of the same hash tag so that it is
--           per call without being part of ARGV (which is the same for every call of a
--           policy, and cached as such); the member is its last ':'-separated part.
--           It is never read or written as a key.
-- ARGV[1]   limit: leases in flight at once
-- ARGV[2]   lease length, microseconds (how long a lease outlives a dead process)
-- ARGV[3]   1 take a lease, 0 hand KEYS[2]'s lease back, 2 count only
--
-- Take:    admitted when fewer than `limit` leases are live (expiry > TIME); then the
--          expired ones are pruned and the new lease added, in this one execution. A
--          denial writes nothing. The key's TTL is the longest lease it holds.
-- Clock:   Redis TIME is the only clock; scores are written with "%.0f" (Lua's default
--          number format would print 16 digits as 1.7e+15).
-- Uses:    ceil_div from integers.lua, which is prepended to this file.
-- Returns: the reply layout of sentinel_core/store/_reference.py (ScriptReply):
--          {allowed 0|1, TIME in us, leases left, us until the oldest live lease
--           expires (denied; else 0), wait in us (1 when denied: a release can come at
--           any moment; else 0), binding bucket 1}

local time = redis.call('TIME')
local now = time[1] * 1000000 + time[2]
local key = KEYS[1]
local limit, lease_us, action = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local live = '(' .. string.format('%.0f', now)

if action == 0 then
  redis.call('ZREM', key, string.match(KEYS[2], '[^:]*$'))
end
local held = redis.call('ZCOUNT', key, live, '+inf')
if action ~= 1 then
  local left = limit - held
  return {1, now, left > 0 and left or 0, 0, 0, 1}
end
if held >= limit then
  local oldest = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return {0, now, 0, tonumber(oldest[2]) - now, 1, 1}
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now))
redis.call('ZADD', key, string.format('%.0f', now + lease_us), string.match(KEYS[2], '[^:]*$'))
local ttl = ceil_div(lease_us, 1000)
local kept = redis.call('PTTL', key)
if kept > ttl then ttl = kept end
redis.call('PEXPIRE', key, ttl)
return {1, now, limit - held - 1, 0, 0, 1}
