-- The calendar quota's period lookup and state decoder, shared by quota.lua and
-- settle.lua; sentinel_core/store/_scripts.py prepends it to each of them, so each is
-- written once.
--
-- quota_period(now, first): the period of the boundaries ARGV[first..] that holds `now`,
-- as (the index of its start in ARGV, start, end), or nil when `now` is outside the table.
-- quota_count(key, at, start, stop): the count of bucket `key` in the period ARGV[at]
-- begins, and the period it counts in, as (count, start, end). A state is
-- "<count>:<period start, unix us>"; one of an older period counts 0; one of a newer
-- period in the table (TIME went back across a boundary, e.g. on a failover) keeps
-- counting in that period. GET is redis.call: another type is an error reply.

local function quota_period(now, first)
  for j = first, #ARGV - 1 do
    if tonumber(ARGV[j]) <= now and now < tonumber(ARGV[j + 1]) then
      return j, tonumber(ARGV[j]), tonumber(ARGV[j + 1])
    end
  end
end

local function quota_outside(now)
  return redis.error_reply('ERR sentinel quota: TIME ' .. string.format('%.0f', now) ..
                           ' is outside the period table')
end

local function quota_count(key, at, start, stop)
  local state = redis.call('GET', key)
  if state then
    local c, s = string.match(state, '^(%d+):(%d+)$')
    if c then
      s = tonumber(s)
      if s >= start then
        for j = at + 1, #ARGV - 1 do
          if tonumber(ARGV[j]) == s then
            start, stop = s, tonumber(ARGV[j + 1])
          end
        end
        return tonumber(c), start, stop
      end
    end
  end
  return 0, start, stop
end

