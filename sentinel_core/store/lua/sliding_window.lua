-- Sentinel sliding window (two-window weighted counter): one atomic decision over one
-- or more buckets.
--
-- KEYS[1..n]  bucket keys; the request is admitted only if EVERY bucket admits it
--             (the anonymous AND of device and network, the limits of a layered
--             policy), and then every bucket is charged. If any denies, nothing is written.
-- ARGV[1]     mode: '0' decide, '1' peek (decide, never write), '2' reset (every
--             bucket written as empty windows, whatever it held)
-- ARGV[2..]   one parameter set per bucket: limit per window (requests), window length
--             (microseconds), cost of one request, and for a `settle` policy a fourth,
--             the ceiling: the highest count read (settle.lua may leave a window in debt,
--             counting up to twice the limit); the stride is (#ARGV - 1) / #KEYS
-- One key:    a call of one key without the ceiling (stride 3) is answered, when it
--             admits (mode 0 or 1), by one integer (below): Redis writes an integer for
--             about 6,500 instructions less than a table. Sending the ceiling (the
--             limit, for a policy without `settle`) asks for the array instead.
--
-- Windows are aligned on multiples of the window length since the Unix epoch. The
-- estimate is previous * (window - elapsed) / window + current; a request is admitted
-- when previous * (window - elapsed) + (current + cost) * window <= limit * window,
-- all integers (the config loader keeps (limit + cost) * window below 2^53, where Lua's
-- doubles are exact and a / b never rounds up to the next integer).
--
-- State:   one integer per bucket, in decimal: the current window's count plus one,
--          the previous window's count, that count's number of digits minus one, and
--          the window index's last digit (the index is the window's start divided by
--          its length): "<current + 1><previous><digits - 1><index mod 10>", e.g. 3
--          and 12 in a window ending in 7 are "41217". It starts with a digit other
--          than 0, so Redis keeps it as an integer (no string allocation: 88 B per
--          bucket, not 104) as long as it fits in 19 digits. Made and read by
--          arithmetic below 10^15 (exact in Lua's doubles), as a string above.
--          Written with SET ... PX only, on admission only; the TTL runs to the end of
--          the next window, after which the state can no longer affect a decision, so
--          the index's last digit tells its window from the current, the previous and
--          the next one. A value
--          that does not parse (garbage, another type: GET fails with WRONGTYPE) is an
--          empty bucket and is overwritten on the next admission, and so is a window
--          older than the previous one or later than the next (up to five away either
--          way; ten away is read as the same window). The next window (TIME went back
--          across a window edge, e.g. on a failover) is kept, and waited for. Counts
--          above the ceiling (the limit, or twice it for a settle policy) count as the
--          ceiling, so Retry-After stays within three windows.
-- Clock:   Redis TIME is the only clock.
-- Uses:    window_counts from window_state.lua, which is prepended to this file.
-- Returns: the reply layout of sentinel_core/store/_reference.py (ScriptReply):
--          {allowed 0|1, TIME in us, remaining requests, us until the window ends,
--           us until the same cost can be admitted again (0 when allowed), index of the
--           binding bucket, and when denied: us until the last key alone admits again
--           (0 if it admits)}, the binding bucket being the one with the fewest requests
--          left (ties: the longest until its window ends).
--          An admission of a one-key call without the ceiling: one integer
--          (WindowAdmission), ceil(us until the window ends / 1000) * (limit + 1) +
--          requests left, all an admission reports (the config loader's bound on
--          (limit + cost) * window keeps it below 2^53).

local time = redis.call('TIME')
local now = time[1] * 1000000 + time[2]
local mode = ARGV[1]
local allowed, wait, last = 1, 0, 0
local remaining, reset, binding = -1, 0, 1
local values, ttls = {}, {}
local stride = (#ARGV - 1) / #KEYS
local last_limit = 0  -- the one key's limit, for its integer reply

for i = 1, #KEYS do
  local b = stride * (i - 1) + 2
  local limit, window, cost = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local ceiling = limit
  last_limit = limit
  if stride > 3 then ceiling = tonumber(ARGV[b + 3]) end
  local index = math.floor(now / window)
  local elapsed = now - index * window
  local current, previous, ahead = 0, 0, 0
  if mode ~= '2' then
    local at
    current, previous, at = window_counts(redis.pcall('GET', KEYS[i]), index, ceiling)
    if at ~= index then  -- the next window: kept, and waited for
      index = at
      ahead, elapsed = index * window - now, 0
    end
  end
  local room = limit * window - previous * (window - elapsed) - current * window
  local left = 0
  last = 0
  if room >= cost * window then
    left = math.floor(room / window) - cost
    local digits, scale = 0, 10  -- previous has digits + 1 digits, scale = 10^(digits + 1)
    while scale <= previous do digits, scale = digits + 1, scale * 10 end
    local value = ((current + cost + 1) * scale + previous) * 100 + digits * 10 + index % 10
    if value >= 1e15 then  -- past what a double holds exactly: made as a string
      value = (current + cost + 1) .. previous .. digits .. (index % 10)
    end
    values[i] = value
  else
    allowed = 0
    if room > 0 then left = math.floor(room / window) end
    local delay
    if current + cost <= limit then
      -- the previous window's weight must fade: the first elapsed that admits
      delay = window - math.floor((limit - current - cost) * window / previous) - elapsed
    else
      -- only the next window can admit: there, this window's count is the previous one
      delay = 2 * window - elapsed - math.floor((limit - cost) * window / current)
    end
    last = ahead + delay
    if last > wait then wait = last end
  end
  ttls[i] = math.ceil((ahead + 2 * window - elapsed) / 1000)
  if remaining < 0 or left < remaining or (left == remaining and ahead + window - elapsed > reset) then
    remaining, reset, binding = left, ahead + window - elapsed, i
  end
  if mode == '2' then values[i] = '100' .. (index % 10) end
end

if mode == '2' then
  for i = 1, #KEYS do
    redis.call('SET', KEYS[i], values[i], 'PX', ttls[i])
  end
  return {1, now, remaining, reset, 0, binding}
end
if allowed == 0 then
  return {0, now, remaining, reset, wait, binding, last}
end
if mode == '0' then
  for i = 1, #KEYS do
    redis.call('SET', KEYS[i], values[i], 'PX', ttls[i])
  end
end
if stride == 3 and #KEYS == 1 then
  return math.ceil(reset / 1000) * (last_limit + 1) + remaining
end
return {1, now, remaining, reset, 0, binding}
