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
local now = time[1] * 1000000 + time[2]
local n = #KEYS
local shared = #ARGV < 3 * n

-- Pass 1 reads every bucket and prepares its write; pass 2 writes, only if every
-- bucket admitted.
local allowed = 1
local remaining, retry_us, reset_us = nil, 0, 0
local values, ttls = {}, {}

for i = 1, n do
  local base = shared and 0 or (i - 1) * 3
  local limit, window = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  local cost = tonumber(ARGV[base + 3])
  local start = idiv(now, window) * window
  local current, previous = 0, 0
  local state = redis.call('GET', KEYS[i])
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
  local ahead, elapsed = 0, now - start
  if elapsed < 0 then
    ahead, elapsed = -elapsed, 0
  end
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
    if ahead + wait > retry_us then retry_us = ahead + wait end
  end
  local unused = limit * window - weighted_previous - current * window
  local left = unused > 0 and idiv(unused, window) or 0
  if remaining == nil or left < remaining then remaining = left end
  if ahead + window - elapsed > reset_us then reset_us = ahead + window - elapsed end
  if allowed == 1 then
    -- "%.0f": Lua's default number format would print 16 digits as 1.7e+15
    values[i] = string.format('%.0f:%.0f:%.0f', current, previous, start)
    ttls[i] = ceil_div(start + 2 * window - now, 1000)
  end
end

if allowed == 1 then
  for i = 1, n do
    redis.call('SET', KEYS[i], values[i], 'PX', ttls[i] > 0 and ttls[i] or 1)
  end
end

local retry_after, reset = 0, ceil_div(reset_us, 1000000)
if allowed == 0 then
  retry_after = ceil_div(retry_us, 1000000)
  if retry_after < 1 then retry_after = 1 end
end
return {allowed, tonumber(time[1]), tonumber(time[2]), remaining,
        retry_after, reset > 0 and reset or 1}
