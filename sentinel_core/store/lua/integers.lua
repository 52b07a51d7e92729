-- Exact integer division for Sentinel's scripts; sentinel_core/store/_scripts.py
-- prepends it to those that divide exactly (its PRELUDES), so they share one definition.
--
-- Lua numbers are doubles: integers are exact below 2^53, but a / b is rounded, and
-- math.floor of a rounded quotient can be off by one when a / b is a hair below an
-- integer. idiv corrects that with exact products (the config loader keeps every
-- product below 2^53).

local function idiv(a, b)
  -- floor(a / b) for non-negative integers a and positive integers b
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function ceil_div(a, b)
  return idiv(a + b - 1, b)
end

