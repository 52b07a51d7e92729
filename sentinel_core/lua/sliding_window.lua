-- Sentinel sliding window (two-window weighted counter): one atomic decision over one
-- or more buckets.
--
-- KEYS[1..n]  bucket keys; the request is admitted only if EVERY bucket admits it
--             (n = 2 for the anonymous cookie AND client-IP decision), and then
--             every bucket is charged. If any bucket denies, nothing is written.
-- ARGV        one parameter set of three per key, or a single set shared by every key:
--   [1]       limit per window (requests)
--   [2]       window length, microseconds
--   [3]       cost of this request
--             (the anonymous AND gives the network bucket a larger limit than the
--             device's: one network is shared by many devices behind a NAT)
--
-- Windows are aligned on multiples of the window length since the Unix epoch. The
-- estimate is previous * (window - elapsed) / window + current; a request is admitted
-- when previous * (window - elapsed) + (current + cost) * window <= limit * window,
-- all integers (the config loader keeps (limit + cost) * window below 2^53).
--
-- State:   one string per bucket, "<current>:<previous>:<window start, unix us>",
--          written with SET ... PX only, on admission only; the TTL runs to the end of
--          the window after this one (two windows from the window's start), after
--          which the state can no longer affect a decision.
-- Clock:   Redis TIME is the only clock.
-- Uses:    idiv and ceil_div from integers.lua, which is prepended to this file.
-- Returns: {allowed 0|1, TIME seconds, TIME microseconds, remaining requests,
--           retry-after seconds (>= 1 when denied, else 0), reset seconds}

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local per_key = #ARGV >= 3 * #KEYS

local allowed = 1
local remaining = -1
local retry_us = 0
local reset_us = 0
local counts = {}

for i, key in ipairs(KEYS) do
  local base = per_key and (i - 1) * 3 or 0
  local limit = tonumber(ARGV[base + 1])
  local window = tonumber(ARGV[base + 2])
  local cost = tonumber(ARGV[base + 3])
  local start = idiv(now, window) * window
  local current, previous = 0, 0
  local state = redis.call('GET', key)
  if state then
    local c, p, s = string.match(state, '^(%d+):(%d+):(%d+)$')
    if c then
      s = tonumber(s)
      if s == start then
        current, previous = tonumber(c), tonumber(p)
      elseif s == start - window then
        previous = tonumber(c)
      elseif s > start then
        -- TIME went backwards across a window edge (failover): keep the newer window.
        start, current, previous = s, tonumber(c), tonumber(p)
      end
    end
  end
  -- a window that starts ahead of TIME (TIME went back): Retry-After and reset wait for it
  local ahead = math.max(0, start - now)
  local elapsed = math.max(0, now - start)
  local weighted_previous = previous * (window - elapsed)
  if weighted_previous + (current + cost) * window <= limit * window then
    current = current + cost
  else
    allowed = 0
    local wait
    if current + cost <= limit then
      -- the previous window's weight must fade: find the first elapsed that admits.
      wait = window - idiv((limit - current - cost) * window, previous) - elapsed
    else
      -- only the next window can admit: there, this window's count is the previous one.
      wait = window - elapsed + window - idiv((limit - cost) * window, current)
    end
    retry_us = math.max(retry_us, ahead + wait)
  end
  counts[i] = {current, previous, start, window}
  local left = idiv(math.max(0, limit * window - previous * (window - elapsed) - current * window), window)
  if remaining < 0 or left < remaining then remaining = left end
  reset_us = math.max(reset_us, ahead + window - elapsed)
end

if allowed == 1 then
  for i, key in ipairs(KEYS) do
    local c = counts[i]
    redis.call('SET', key, string.format('%.0f:%.0f:%.0f', c[1], c[2], c[3]),
      'PX', math.max(1, ceil_div(c[3] + 2 * c[4] - now, 1000)))
  end
end

local retry_after = 0
if allowed == 0 then retry_after = math.max(1, ceil_div(retry_us, 1000000)) end
return {allowed, tonumber(time[1]), tonumber(time[2]), remaining,
        retry_after, math.max(1, ceil_div(reset_us, 1000000))}
