-- Sentinel token bucket: one atomic decision over one or more buckets.
--
-- KEYS[1..n]  bucket keys; the request is admitted only if EVERY bucket admits it
--             (n = 2 for the anonymous cookie AND client-IP decision), and then
--             every bucket is charged. If any bucket denies, nothing is written.
-- ARGV        one parameter set of four per key, or a single set shared by every key:
--   [1]       capacity in micro-tokens (burst * 1e6)
--   [2]       refill count     } the refill rate is count tokens per period seconds
--   [3]       refill period, seconds
--   [4]       cost in micro-tokens
--             (the anonymous AND gives the network bucket a larger set than the
--             device's: one network is shared by many devices behind a NAT)
--
-- State:   one string per bucket, "<micro-tokens>:<last refill, unix us>", written with
--          SET ... PX only, on admission only. An absent key is a full bucket; the TTL
--          is the time until the bucket would be full again, so expiry loses nothing.
-- Clock:   Redis TIME is the only clock. A stored refill time ahead of TIME (TIME went
--          back, e.g. on a failover) is never moved back: the bucket refills from that
--          time on, and Retry-After, reset and the TTL count the wait until then.
--          All arithmetic is on integers kept below 2^53
--          (the config loader refuses policies that could exceed it), so the doubles
--          Lua computes with stay exact. Rounding always favours the limiter.
-- Uses:    idiv and ceil_div from integers.lua, which is prepended to this file.
-- Returns: {allowed 0|1, TIME seconds, TIME microseconds, remaining whole tokens,
--           retry-after seconds (>= 1 when denied, else 0), reset seconds}

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local per_key = #ARGV >= 4 * #KEYS

local allowed = 1
local remaining = -1
local retry_us = 0
local reset_us = 0
local after = {}
local ahead = {}
local params = {}

for i, key in ipairs(KEYS) do
  local base = per_key and (i - 1) * 4 or 0
  local capacity = tonumber(ARGV[base + 1])
  local count = tonumber(ARGV[base + 2])
  local period = tonumber(ARGV[base + 3])
  local cost = tonumber(ARGV[base + 4])
  local fill_us = ceil_div(capacity * period, count)
  params[i] = {capacity, count, period}
  local tokens = capacity
  ahead[i] = 0
  local state = redis.call('GET', key)
  if state then
    local stored, last = string.match(state, '^(%d+):(%d+)$')
    if stored then
      local elapsed = now - tonumber(last)
      if elapsed < 0 then
        ahead[i] = -elapsed
        elapsed = 0
      end
      if elapsed > fill_us then elapsed = fill_us end
      tokens = math.min(capacity, tonumber(stored) + idiv(elapsed * count, period))
    end
  end
  if tokens >= cost then
    after[i] = tokens - cost
  else
    allowed = 0
    after[i] = tokens
    retry_us = math.max(retry_us, ahead[i] + ceil_div((cost - tokens) * period, count))
  end
  if remaining < 0 or after[i] < remaining then remaining = after[i] end
end

for i, key in ipairs(KEYS) do
  local capacity, count, period = params[i][1], params[i][2], params[i][3]
  local refill_us = ahead[i] + ceil_div((capacity - after[i]) * period, count)
  reset_us = math.max(reset_us, refill_us)
  if allowed == 1 then
    redis.call('SET', key, string.format('%.0f:%.0f', after[i], now + ahead[i]),
      'PX', math.max(1, ceil_div(refill_us, 1000)))
  end
end

local retry_after = 0
if allowed == 0 then retry_after = math.max(1, ceil_div(retry_us, 1000000)) end
return {allowed, tonumber(time[1]), tonumber(time[2]), idiv(remaining, 1000000),
        retry_after, ceil_div(reset_us, 1000000)}
