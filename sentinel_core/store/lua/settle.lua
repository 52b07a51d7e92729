-- Sentinel settlement: a `settle` policy's request, once its usage is known, is charged
-- what it used instead of what it reserved (SPEC §2 `settle`): the difference is
-- refunded, or the excess charged, in every bucket the reservation charged, at once.
--
-- KEYS[1..n]  the reservation's buckets (every limit of a layered policy, the device's
--             and the network's of an anonymous one), as the reservation named them
-- ARGV[1]     the algorithm: 1 token bucket, 2 sliding window, 3 quota
-- Token bucket, per bucket ARGV[3i-1..3i+1]:
--   delta     microseconds added to the theoretical arrival time (TAT): the used
--             units' refill time less the reserved units' (negative: a refund)
--   bound     how far ahead of TIME an excess may push the TAT: an empty bucket's (for
--             the reservation's cost) plus one capacity. This is the debt bound.
--   horizon   how far ahead of TIME a TAT is read as a state (token_bucket.lua's
--             horizon of a settle policy); further is a full bucket
-- Sliding window, per bucket ARGV[3i-1..3i+1]:
--   delta     requests added to the current window's count (negative: a refund)
--   window    window length, microseconds
--   ceiling   twice the limit: an excess stops where the window's estimate reaches it
--             (one capacity of debt), and counts are read up to it
-- Quota, one bucket: ARGV[2] delta, ARGV[3] ceiling (twice the limit), ARGV[4..] the
--             period boundaries, as quota.lua takes them.
--
-- A refund never takes a bucket above full (a TAT before TIME, a count below 0); an
-- excess never lowers a state already further in debt than the bound. A sliding window
-- or quota state of another window or period is read as quota.lua and
-- sliding_window.lua read it (a window in the future is the one settled). A bucket the
-- settlement leaves unchanged is not written; a token bucket refunded to full is
-- written as full (TIME, PX 1), like a reset.
-- State:   the admission scripts' own, written with SET ... PX only, with their TTLs.
-- Clock:   Redis TIME is the only clock; every number stays an integer below 2^53 (the
--          config loader checks TIME plus twice the horizon, and the process bounds
--          delta by `bound` or `ceiling`).
-- Uses:    idiv and ceil_div from integers.lua, window_counts from window_state.lua,
--          quota_period, quota_outside and quota_count from quota_state.lua, all
--          prepended to this file.
-- Returns: TIME in microseconds.

local time = redis.call('TIME')
local now = time[1] * 1000000 + time[2]
local algorithm = ARGV[1]

if algorithm == '1' then
  for i = 1, #KEYS do
    local b = 3 * i - 1
    local delta, bound, horizon = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
    local tat = now
    local state = redis.pcall('GET', KEYS[i])
    if type(state) == 'string' and string.find(state, '^%d+$') then
      local stored = tonumber(state)
      if stored > now and stored <= now + horizon then tat = stored end
    end
    local new = tat + delta
    if delta > 0 then
      if new > now + bound then new = now + bound end
      if new < tat then new = tat end
    elseif new < now then
      new = now
    end
    if new > now and new ~= tat then
      redis.call('SET', KEYS[i], string.format('%.0f', new), 'PX', ceil_div(new - now, 1000))
    elseif new ~= tat then
      redis.call('SET', KEYS[i], string.format('%.0f', now), 'PX', 1)
    end
  end
  return now
end

if algorithm == '2' then
  for i = 1, #KEYS do
    local b = 3 * i - 1
    local delta, window, ceiling = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
    local index = math.floor(now / window)
    local elapsed = now - index * window
    local current, previous, at = window_counts(redis.pcall('GET', KEYS[i]), index, ceiling)
    local ahead = 0
    if at ~= index then  -- the next window: settled there
      index = at
      ahead, elapsed = index * window - now, 0
    end
    local new = current + delta
    if delta > 0 then
      -- the estimate previous * (window - elapsed) / window + new stays within ceiling
      local most = idiv(ceiling * window - previous * (window - elapsed), window)
      if new > most then new = most end
      if new < current then new = current end
    elseif new < 0 then
      new = 0
    end
    if new ~= current then
      local p = tostring(previous)
      redis.call('SET', KEYS[i], (new + 1) .. p .. (#p - 1) .. (index % 10), 'PX',
                 math.ceil((ahead + 2 * window - elapsed) / 1000))
    end
  end
  return now
end

local delta, ceiling = tonumber(ARGV[2]), tonumber(ARGV[3])
local at, start, stop = quota_period(now, 4)
if not at then return quota_outside(now) end
local count
count, start, stop = quota_count(KEYS[1], at, start, stop)
local new = count + delta
if delta > 0 then
  if new > ceiling then new = ceiling end
  if new < count then new = count end
elseif new < 0 then
  new = 0
end
if new ~= count then
  redis.call('SET', KEYS[1], string.format('%.0f:%.0f', new, start), 'PX',
             ceil_div(stop - now, 1000))
end
return now
