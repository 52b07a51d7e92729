-- Sentinel token bucket (GCRA): one atomic decision over one or more buckets.
--
-- KEYS[1..n]  bucket keys; the request is admitted only if EVERY bucket admits it
--             (the anonymous AND of device and network, the limits of a layered
--             policy), and then every bucket is charged. If any denies, nothing is written.
-- ARGV[1]     mode: '0' decide, '1' peek (decide, never write), '2' reset (refill
--             every bucket: each is written as full, whatever it held)
-- ARGV[2..]   one parameter set per bucket, four values each, or five for a `settle`
--             policy (the stride is (#ARGV - 1) / #KEYS):
--   inc       microseconds one request's cost takes to refill, rounded up
--   tau       how far ahead of TIME the arrival time may be for a request to be
--             admitted: (floor(burst / cost) - 1) * inc, so exactly floor(burst / cost)
--             requests pass in a burst
--   cost      tokens one request consumes  } only to report the tokens left:
--   burst     the bucket's capacity        } burst - ceil(debt / inc) * cost, at least 0
--   horizon   (settle policies) how far ahead of TIME a TAT is still read as a state:
--             settle.lua may leave a bucket in debt, up to one capacity below empty, and
--             this reads it (the default, tau + inc, is an empty bucket's TAT)
-- One key:    a call of one key may leave out cost and burst (its set is then inc, tau
--             and a settle policy's horizon): the caller, which knows them, computes the
--             tokens left itself, and the reply is one integer (below). Each argument
--             costs Redis about 1,600 instructions to take and 1,200 more to read as a
--             number.
--
-- State:   one integer per bucket, the theoretical arrival time (TAT, unix us): the
--          instant the bucket is full again. Written with SET ... PX only, on admission
--          only, with the TTL running out at the TAT, so an expired key is a full bucket
--          and expiry loses nothing. Redis stores such a value as an integer (no string
--          allocation). A value that is not a plain decimal integer (garbage, another
--          type: GET fails with WRONGTYPE) is a full bucket, and is overwritten on the
--          next admission. So is a TAT further ahead than an empty bucket's (a bad write,
--          or TIME went back by more than the bucket's slack, e.g. on a failover): a
--          denial is never written, so clamping it would keep it wrong; as a full bucket
--          it is overwritten, and Retry-After stays within inc (one request's refill).
-- Clock:   Redis TIME is the only clock. Every number stays an integer below 2^53 (the
--          config loader checks TIME + tau + inc), where Lua's doubles are exact, and
--          a / b for such integers never rounds up to the next integer.
-- Returns: the reply layouts of sentinel_core/store/_reference.py. Parameter sets of
--          four or five values: ScriptReply,
--          {allowed 0|1, TIME in us, remaining tokens, us until full, us until the same
--           cost can be admitted again (0 when allowed), index of the binding bucket,
--           and when denied: us until the last key alone admits again (0 if it admits)}
--          where the binding bucket is the one with the fewest tokens left (ties: the
--          longest until full), whose remaining and reset the reply carries.
--          A one-key call without cost and burst: one integer (OneKeyReply), the us
--          until the bucket is full when admitted (at least 1), minus the us until the
--          same cost can be admitted again when denied (the us until full is that plus
--          tau). Redis writes an integer for about 6,500 instructions less than a table
--          (which it checks for err, ok, double, map and set fields).

local time = redis.call('TIME')
local now = time[1] * 1000000 + time[2]
local mode = ARGV[1]
local allowed, wait, last = 1, 0, 0
local remaining, reset, binding = -1, 0, 1
local tats = {}
local stride = (#ARGV - 1) / #KEYS
local reports_left = stride > 3  -- cost and burst sent: the reply reports the tokens left

for i = 1, #KEYS do
  local b = stride * (i - 1) + 2
  local inc, tau = tonumber(ARGV[b]), tonumber(ARGV[b + 1])
  local horizon = tau + inc
  if stride % 2 == 1 then horizon = tonumber(ARGV[b + stride - 1]) end
  local tat = now
  if mode ~= '2' then
    local state = redis.pcall('GET', KEYS[i])
    if type(state) == 'string' and string.find(state, '^%d+$') then
      local stored = tonumber(state)
      if stored > now and stored <= now + horizon then tat = stored end
    end
  end
  local debt = tat - now
  last = 0
  if debt > tau then
    allowed, last = 0, debt - tau
    if last > wait then wait = last end
  else
    tats[i] = tat + inc
    debt = debt + inc
  end
  if reports_left then
    local left = ARGV[b + 3] - math.ceil(debt / inc) * ARGV[b + 2]
    if left < 0 then left = 0 end  -- a bucket in debt (settle.lua)
    if remaining < 0 or left < remaining or (left == remaining and debt > reset) then
      remaining, reset, binding = left, debt, i
    end
  elseif debt > reset then
    reset = debt
  end
end

if mode == '2' then
  for i = 1, #KEYS do
    redis.call('SET', KEYS[i], now, 'PX', 1)
  end
elseif allowed == 1 and mode == '0' then
  for i = 1, #KEYS do
    redis.call('SET', KEYS[i], tats[i], 'PX', math.ceil((tats[i] - now) / 1000))
  end
end
if not reports_left then  -- one key (a reset always admits)
  if allowed == 0 then return -wait end
  return reset
end
if allowed == 0 then
  return {0, now, remaining, reset, wait, binding, last}
end
return {1, now, remaining, reset, 0, binding}
