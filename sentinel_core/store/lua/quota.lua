-- Sentinel calendar quota: N requests per day, ISO week or month of a time zone.
--
-- KEYS[1]   the bucket key
-- ARGV[1]   limit per period
-- ARGV[2]   cost of this request (0: read only, nothing is written; -1: reset, the
--           period's count written as 0 whatever it held: an administrative action)
-- ARGV[3..] period boundaries, unix microseconds (UTC), ascending: the process turns
--           the time zone's calendar (month lengths, leap days, DST) into this table,
--           and TIME picks the period it falls in. Redis has no time zone rules; the
--           process has no say in which period counts (its clock only chooses which
--           boundaries to send, a few periods around its own now).
--
-- State:   one string, "<count>:<period start, unix us>", written with SET ... PX only,
--          on admission only, expiring at the period's end. A state of an older period
--          counts as 0; one of a newer period (TIME went back across a boundary, e.g.
--          on a failover) keeps counting in that period.
-- Clock:   Redis TIME is the only clock. A TIME outside the table (the process clock
--          is off from Redis's by more than a period) is an error reply: a store
--          failure, decided by the policy's fail mode, never a guess.
-- Uses:    ceil_div from integers.lua, quota_period, quota_outside and quota_count
--          from quota_state.lua, prepended to this file.
-- Returns: the reply layout of sentinel_core/store/_reference.py (ScriptReply):
--          {allowed 0|1, TIME in us, remaining requests, us until the period's end,
--           us until the period's end when denied (else 0), binding bucket 1}

local time = redis.call('TIME')
local now = time[1] * 1000000 + time[2]
local limit, cost = tonumber(ARGV[1]), tonumber(ARGV[2])
local at, start, stop = quota_period(now, 3)
if not at then return quota_outside(now) end
if cost < 0 then
  redis.call('SET', KEYS[1], string.format('0:%.0f', start), 'PX', ceil_div(stop - now, 1000))
  return {1, now, limit, stop - now, 0, 1}
end
local count
count, start, stop = quota_count(KEYS[1], at, start, stop)
local allowed = 1
if count + cost > limit then
  allowed = 0
else
  count = count + cost
end
if allowed == 1 and cost > 0 then
  redis.call('SET', KEYS[1], string.format('%.0f:%.0f', count, start), 'PX',
             ceil_div(stop - now, 1000))
end
local remaining = limit - count
return {allowed, now, remaining > 0 and remaining or 0, stop - now,
        allowed == 1 and 0 or stop - now, 1}
