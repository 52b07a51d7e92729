-- The sliding window's state decoder, shared by sliding_window.lua and settle.lua;
-- sentinel_core/store/_scripts.py prepends it to each of them, so it is written once.
--
-- A state is "<current + 1><previous><digits of previous - 1><index mod 10>" (see
-- sliding_window.lua's header). window_counts(state, index, ceiling) reads one (a GET's
-- reply, or its WRONGTYPE error table) in window `index` and returns the current and the
-- previous window's counts, each at most `ceiling`, and the window they count in:
-- `index`, or `index + 1` when the state's window is the next one (TIME went back across
-- a window edge, e.g. on a failover: the newer window is kept, and waited for). A state
-- that does not parse, or of a window older than the previous one (or more than one
-- ahead), counts 0 and 0 in `index`.

local function window_counts(state, index, ceiling)
  local c, p, phase
  if type(state) == 'string' and string.find(state, '^[1-9]%d*$') then
    if #state <= 15 then
      -- exact in a double (below 2^53): split by arithmetic, no string made
      local v = tonumber(state)
      phase = v % 10
      v = (v - phase) / 10
      local scale = 10 ^ (v % 10 + 1)
      v = (v - v % 10) / 10
      if v >= scale then
        p = v % scale
        c = (v - p) / scale - 1
      end
    else
      local counts, digits
      counts, digits, phase = string.match(state, '^(%d+)(%d)(%d)$')
      if #counts > digits + 1 then
        c = tonumber(string.sub(counts, 1, -digits - 2)) - 1
        p = tonumber(string.sub(counts, -digits - 1))
      end
    end
  end
  if not c then return 0, 0, index end
  local current, previous = 0, 0
  local distance = (index - phase) % 10
  if distance == 0 then
    current, previous = c, p
  elseif distance == 1 then
    previous = c
  elseif distance == 9 then
    current, previous, index = c, p, index + 1
  end
  if current > ceiling then current = ceiling end
  if previous > ceiling then previous = ceiling end
  return current, previous, index
end

