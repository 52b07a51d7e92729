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
local now = time[1] * 1000000 + time[2]
local n = #KEYS
local shared = #ARGV < 4 * n

-- Pass 1 reads every bucket and prepares its write; pass 2 writes, only if every
-- bucket admitted.
local allowed = 1
local remaining, retry_us, reset_us = nil, 0, 0
local values, ttls = {}, {}

for i = 1, n do
  local base = shared and 0 or (i - 1) * 4
  local capacity, count = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  local period, cost = tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
  local tokens, ahead = capacity, 0
  local state = redis.call('GET', KEYS[i])
  if state then
    local stored, last = string.match(state, '^(%d+):(%d+)$')
    if stored then
      local elapsed = now - tonumber(last)
      if elapsed < 0 then
        ahead, elapsed = -elapsed, 0
      end
      local fill_us = ceil_div(capacity * period, count)
      if elapsed > fill_us then elapsed = fill_us end
      tokens = tonumber(stored) + idiv(elapsed * count, period)
      if tokens > capacity then tokens = capacity end
    end
  end
  local after = tokens - cost
  if after < 0 then
    allowed, after = 0, tokens
    local wait = ahead + ceil_div((cost - tokens) * period, count)
    if wait > retry_us then retry_us = wait end
  end
  if remaining == nil or after < remaining then remaining = after end
  local refill_us = ahead + ceil_div((capacity - after) * period, count)
  if refill_us > reset_us then reset_us = refill_us end
  if allowed == 1 then
    -- "%.0f": Lua's default number format would print 16 digits as 1.7e+15
    values[i] = string.format('%.0f:%.0f', after, now + ahead)
    ttls[i] = ceil_div(refill_us, 1000)
  end
end

if allowed == 1 then
  for i = 1, n do
    redis.call('SET', KEYS[i], values[i], 'PX', ttls[i] > 0 and ttls[i] or 1)
  end
end

local retry_after = 0
if allowed == 0 then
  retry_after = ceil_div(retry_us, 1000000)
  if retry_after < 1 then retry_after = 1 end
end
return {allowed, tonumber(time[1]), tonumber(time[2]), idiv(remaining, 1000000),
        retry_after, ceil_div(reset_us, 1000000)}
