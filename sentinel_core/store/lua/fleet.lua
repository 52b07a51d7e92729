-- Sentinel fleet heartbeat: announce one process and count the live ones (SPEC §2,
-- fallback_scope "fleet").
--
-- KEYS      one sorted set per fleet-scoped endpoint, all of one hash tag (one Cluster
--           slot): members = process names, scores = when each last announced itself
--           (unix milliseconds by Redis TIME).
-- ARGV[1]   this process's name (a pid and a random part, never an identity)
-- ARGV[2]   lifetime in milliseconds: a member not heard from for that long is gone
--
-- Per key: drop the members older than the lifetime, add or refresh this one, set the
-- key's TTL to the lifetime (a fleet that stops leaves nothing behind), count.
-- Bounded: a set holds only the processes heard from within one lifetime, and each
-- process writes once per heartbeat, whatever its traffic. No KEYS/SCAN/DEL.
-- Clock:   Redis TIME is the only clock; scores are written with "%.0f".
-- Returns: the live count of each key, in KEYS order.

local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
local member, lifetime = ARGV[1], tonumber(ARGV[2])
local counts = {}
for index, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. string.format('%.0f', now - lifetime))
  redis.call('ZADD', key, string.format('%.0f', now), member)
  redis.call('PEXPIRE', key, lifetime)
  counts[index] = redis.call('ZCARD', key)
end
return counts
