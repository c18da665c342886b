-- chanlimit's decisions for a call of requests: each key decided
-- atomically, under all its policies at once, by the in-memory rules of
-- package algorithms applied to whole microseconds. The script reports
-- each policy's own numbers; the store combines them as a router does in
-- memory (algorithms.Combine).
--
-- KEYS  one per request: the key's Redis key (its value: "A key's value").
-- ARGV  1: little-endian doubles: the grace kept past a key's ResetAfter
--       (ms), on Redis's clock and on the caller's; how long a record is
--       kept (ms); the lowest call of the store's its client may still
--       send; the call's number; how many calls below that lowest Redis
--       may yet run, then those; then for each request: kind (ALLOW to
--       HOLD), n (a hold's: how long, us), its set (1 for ARGV[4], ...), its own time (us; -1:
--       Redis's clock, TIME), and a generation: for a give back, its
--       grant's; for any other, one drawn for the key, if it makes its
--       states afresh. Each is decided at the later of its own time and
--       the key's last write, and tells each wait from its own time.
--       2: the store's id; 3: the call's number; then the sets of
--       policies, one string each: for each policy six doubles
--       (algorithm, negated for a dry-run policy; limit; window (us);
--       capacity; for a bucket, units refilled a microsecond and units in
--       a token, else 0, 0), then its field's length (2 bytes) and bytes.
--
-- The enforced policies decide an allow, a peek or a turn together: it
-- takes from them if each allows (a turn, a waiter's: only if none delays
-- it either; a peek never). A dry-run policy decides each allow, peek and
-- granted turn alone, as if it were the key's only policy, taking if it
-- allows (not on a peek). A dry run, a request that callers waiting on
-- its key refused, is decided by the dry-run policies alone. A refund
-- gives n units back to each policy that has a state; a give back to the
-- enforced ones, if the key's generation is still the grant's and its
-- policies the grant's params, else nothing. A reset drops the key's
-- states, and its hold. A hold keeps the key from being granted anything
-- until its end (moved only later): an allow, a peek or a turn on it is
-- decided as a peek at the end, by the enforced policies alone, taking
-- nothing; a dry run decides nothing.
--
-- Returns a string of little-endian doubles (a table of numbers would be
-- a reply of as many integers): 1 if the call changed a key, else 0; then
-- for an allow, a peek, a turn or a dry run: -1 if the key holds a value
-- the script did not write, or the key's generation and the wait until
-- its hold ends (us; 0: none), then for each policy allowed, remaining,
-- retry after, reset after, delay (us), by how many ns its retry after
-- was rounded up, and, where it allowed a request the enforced policies
-- denied together, or the key is held, its reset after as it is (else
-- 0); a dry-run policy that did not decide says allowed. A held key's
-- waits are told from its hold's end. A refund or a hold: 0 or -1; a
-- reset or a give back: nothing.
--
-- A call that changes a key leaves its answers in the first key it writes
-- (a record), kept as long as the client may send the call again: a call
-- sent again (go-redis retries a pipeline after a read timeout; a stalled
-- Redis runs every attempt once it wakes) answers as the first time,
-- deciding nothing twice. A key's value keeps the states of policies the
-- call does not name (another instance's, in a rolling deploy) while they
-- last. Every number is an integer below 2^53 (Check bounds the policies
-- so), and every division goes through idiv, which is exact.
--
-- Run as a script (EVAL), this file's last line calls decideCall; as a
-- Redis Function, redislimit puts a library's header before it and
-- registers decideCall instead. Nothing a call sets outlives it but the
-- sets of policies (setOf) and struct's formats (doubles), which depend on
-- their arguments alone. A request is served by serve, which reads a
-- key's value into tables and writes it back whole, or, the common one,
-- by fast, which reads one bucket's or window's two numbers in place and
-- writes them back by one pack.

-- The request kinds and the algorithms, by the numbers the store sends:
-- Go's (chanlimit.StoreOpKind, and redislimit's scriptAlgorithm), written
-- here by go generate. The script counts on their order, which the test
-- that writes them checks: ALLOW and PEEK first, then REFUND, the others
-- after; the three buckets first (TOKEN_BUCKET, GCRA, LEAKY_BUCKET).
-- BEGIN go generate: do not edit
local ALLOW, PEEK, REFUND, RESET, TURN, GIVE_BACK, DRY_RUN, HOLD = 1, 2, 3, 4, 5, 6, 7, 8
local TOKEN_BUCKET, GCRA, LEAKY_BUCKET, SLIDING_WINDOW_LOG, SLIDING_WINDOW_COUNTER, FIXED_WINDOW = 1, 2, 3, 4, 5, 6
-- END go generate

-- The library's functions, as locals (a local is found at once, a global
-- through two tables), bound by the first call, since a library is loaded
-- where none of them exists.
local floor, max, min, sub, byte, find, rep, format, concat
local spack, sunpack, rcall
local META -- a key's own entry before its numbers (see "A key's value")

local function bind()
  floor, max, min = math.floor, math.max, math.min
  sub, byte, find, rep, format, concat = string.sub, string.byte, string.find, string.rep, string.format, table.concat
  spack, sunpack, rcall = struct.pack, struct.unpack, redis.call
  META = spack('<Hc0I4', 1, '@', 5)
end

-- floor(a / b) for integers 0 <= a < 2^53, 0 < b.
local function idiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then return q - 1 elseif r >= b then return q + 1 end
  return q
end

-- ceil(a / b), likewise.
local function cdiv(a, b)
  local q = idiv(a, b)
  return q * b < a and q + 1 or q
end

-- atLeast reports whether c * p >= 1000 * b, exactly, for integers
-- 0 <= c <= 1001 and 0 <= b, p < 2^53: each product is taken in limbs of
-- 2^26, whose partial products stay below 2^53.
local LIMB = 67108864 -- 2^26
local function atLeast(c, p, b)
  local xh, xl = c * math.floor(p / LIMB), c * (p % LIMB)
  local yh, yl = 1000 * math.floor(b / LIMB), 1000 * (b % LIMB)
  xh, xl = xh + math.floor(xl / LIMB), xl % LIMB
  yh, yl = yh + math.floor(yl / LIMB), yl % LIMB
  return xh > yh or (xh == yh and xl >= yl)
end

-- ceilMilli returns ceil(1000 * b / p) for integers 0 <= b < p < 2^53:
-- in [0, 1000], exactly, though 1000 * b may pass 2^53.
local function ceilMilli(b, p)
  if b == 0 then return 0 end
  local c = math.min(math.ceil(1000 * (b / p)), 1000) -- within one of it
  while not atLeast(c, p, b) do c = c + 1 end
  while c > 1 and atLeast(c - 1, p, b) do c = c - 1 end
  return c
end

-- The waits are whole microseconds, rounded up from the in-memory rules'
-- nanoseconds; a wait's sub tells by how many nanoseconds it was (in
-- [0, 999]), so that the caller picks the policy with the longest wait as
-- memory does, however close. extend lengthens a wait by ahead, as
-- algorithms' extend does.
local function extend(wait, ahead)
  return wait > 0 and wait + ahead or wait
end

---------------------------------------------------------------- the rules
-- A policy's state is the array it is stored as: {limit, window, capacity,
-- the algorithm's numbers...}. Each algorithm's rules (rules, below) are:
--
--   decide(p, t, now, n)  decides n units on state t at now: allowed,
--                         remaining, retry after, reset after, delay, the
--                         retry's rounding (ns), and if allowed the state
--                         after (a new array: t is left as it was)
--   resetAfter(p, t, now) t's reset after at now
--   refund(p, t, now, n)  gives n units back to t, in place
--   adopt(p, t, now)      t, saved under other params, carried over to p's
--                         (SetPolicies), as a new array
--   fresh(p, now)         the untouched state
--
-- Each decides a state that holds units at the later of now and the
-- state's last instant, and lengthens its waits by how far ahead of now
-- that is.

---------------------------------------------------------------- buckets
-- token_bucket, gcra and leaky_bucket: {..., used, last}, the units used
-- at last (us); a token is perToken units, perUs units refill each
-- microsecond, a full bucket is cap tokens.

-- bucketUsed returns a bucket's used units at now, refilled at perUs a
-- microsecond since last, the instant it is decided at (last, if now is
-- before it) and how far ahead of now that is.
local function bucketUsed(perUs, used, last, now)
  local at, ahead = max(now, last), max(last - now, 0)
  if at > last and used > 0 then
    used = at - last >= cdiv(used, perUs) and 0 or used - (at - last) * perUs
  end
  return used, at, ahead
end

-- bucketDecision decides n units on a bucket that had used units at last,
-- at now, as decide does, but returns the state after as its two numbers
-- (used, last). It is on the path of every bucket request: bucketUsed is
-- written out in it, and a division by 1 (perUs is 1 whenever the limit
-- divides the window in microseconds) is not made, since a Lua call costs
-- more than the arithmetic.
local function bucketDecision(p, used, last, now, n)
  local perUs, perToken = p.perUs, p.perToken
  local at, ahead = now, 0
  if now < last then
    at, ahead = last, last - now
  end
  local el = at - last
  if el > 0 and used > 0 then
    used = el >= (perUs == 1 and used or cdiv(used, perUs)) and 0 or used - el * perUs
  end
  local full, need = p.cap * perToken, n * perToken
  local free = full - used
  if free < need then
    local deficit = used + need - full
    local r = deficit - idiv(deficit, perUs) * perUs
    return false, idiv(free, perToken), extend(cdiv(deficit, perUs), ahead), extend(cdiv(used, perUs), ahead),
      0, r > 0 and 1000 - ceilMilli(r, perUs) or 0
  end
  local delay = 0
  if p.alg == LEAKY_BUCKET then
    delay = cdiv(used, perUs) + ahead -- leaky_bucket: its turn, once the units queued ahead have drained
  end
  local remaining, reset = free - need, used + need
  if perToken ~= 1 then remaining = idiv(remaining, perToken) end
  if perUs ~= 1 then reset = cdiv(reset, perUs) end
  if reset > 0 then reset = reset + ahead end -- extend, written out
  return true, remaining, 0, reset, delay, 0, used + need, at
end

local bucket = {
  decide = function(p, t, now, n)
    local ok, remaining, retry, reset, delay, rounded, used, last = bucketDecision(p, t[4], t[5], now, n)
    return ok, remaining, retry, reset, delay, rounded, ok and {p.limit, p.window, p.cap, used, last}
  end,
  resetAfter = function(p, t, now)
    local used, _, ahead = bucketUsed(p.perUs, t[4], t[5], now)
    return extend(cdiv(used, p.perUs), ahead)
  end,
  refund = function(p, t, _, n)
    t[4] = max(t[4] - n * p.perToken, 0)
  end,
  -- As algorithms' bucket adopt: whole free tokens kept, capped at the
  -- capacity, and the part of a token.
  adopt = function(p, t, now)
    local a, b = t[1], t[2]
    while b ~= 0 do a, b = b, a % b end
    local perUs, perToken = t[1] / a, t[2] / a
    local used, last = bucketUsed(perUs, t[4], t[5], now)
    local free = t[3] * perToken - used
    local q = idiv(free, perToken)
    if q >= p.cap then
      return {p.limit, p.window, p.cap, 0, last}
    end
    local part = idiv((free - q * perToken) * p.perToken, perToken)
    return {p.limit, p.window, p.cap, p.cap * p.perToken - q * p.perToken - part, last}
  end,
  fresh = function(p, now) -- a fresh bucket is full, whenever it was made
    return {p.limit, p.window, p.cap, 0, now}
  end,
}

---------------------------------------------------------------- fixed window
-- {..., start, count}.

-- fixedDecision decides n units on a window that started at start with
-- count units, at now, as decide does, but returns the state after as its
-- two numbers (start, count).
local function fixedDecision(p, start, count, now, n)
  local at, ahead = now, 0
  if count > 0 and now < start then
    at, ahead = start, start - now
  end
  local c = 0
  if count > 0 and at - start < p.window then
    c = count
  else
    start = at
  end
  local left = extend(p.window - (at - start), ahead)
  if n > p.limit - c then
    return false, p.limit - c, left, left, 0, 0
  end
  return true, p.limit - c - n, 0, left, 0, 0, start, c + n
end

local function fixedResetAfter(p, t, now) -- the time left of a window that holds units, open at now
  local start, count = t[4], t[5]
  local at = max(now, start)
  if count == 0 or at - start >= p.window then return 0 end
  return extend(p.window - (at - start), at - now)
end

local fixed = {
  decide = function(p, t, now, n)
    local ok, remaining, retry, reset, delay, rounded, start, count = fixedDecision(p, t[4], t[5], now, n)
    return ok, remaining, retry, reset, delay, rounded, ok and {p.limit, p.window, p.cap, start, count}
  end,
  resetAfter = fixedResetAfter,
  refund = function(p, t, now, n)
    if fixedResetAfter(p, t, now) > 0 then t[5] = t[5] - min(n, t[5]) end
  end,
  adopt = function(p, t, now)
    local s = {p.limit, p.window, p.cap, t[4], min(t[5], p.limit)}
    if fixedResetAfter({window = t[2]}, t, now) == 0 or fixedResetAfter(p, s, now) == 0 then
      return {p.limit, p.window, p.cap, 0, 0}
    end
    return s
  end,
  fresh = function(p)
    return {p.limit, p.window, p.cap, 0, 0}
  end,
}

---------------------------------------------------------------- sliding window counter
-- {..., start, prev, cur}.

-- roll returns a counter's window at now, rolled on by window: its start,
-- prev and cur, the instant it is decided at and how far ahead of now.
local function roll(window, t, now)
  local start, prev, cur, ahead = t[4], t[5], t[6], 0
  if prev > 0 or cur > 0 then
    if now < start then
      now, ahead = start, start - now
    end
    local el = now - start
    if el >= window and el - window < window then
      start, prev, cur = start + window, cur, 0
    elseif el >= window then
      prev, cur = 0, 0
    end
  end
  if prev == 0 and cur == 0 then
    start = now
  end
  return start, prev, cur, now, ahead
end

-- weigh is floor(prev * (Window - 1ns - elapsed) / Window) in nanoseconds,
-- for elapsed and Window in whole microseconds.
local function weigh(p, prev, el)
  local a = prev * (p.window - el)
  local q = idiv(a, p.window)
  return 1000 * (a - q * p.window) >= prev and q or q - 1
end

-- firstFit returns the first elapsed (us, rounded up from the nanosecond)
-- at which weigh(prev, elapsed) <= room, as algorithms' firstFit, and by
-- how many nanoseconds it was rounded.
local function firstFit(p, prev, room)
  if prev <= room then return 0, 0 end
  -- In nanoseconds, Window - ceil((room + 1) * Window / prev).
  local x = (room + 1) * p.window
  local q = idiv(x, prev)
  local k = ceilMilli(x - q * prev, prev)
  if k == 1000 then return p.window - q - 1, 0 end
  return p.window - q, k
end

local function counterResetAfter(p, t, now)
  local start, prev, cur, at, ahead = roll(p.window, t, now)
  if cur > 0 then return extend(2 * p.window - (at - start), ahead) end
  if prev > 0 then return extend(p.window - (at - start), ahead) end
  return 0
end

local counter = {
  decide = function(p, t, now, n)
    if n > p.limit then error('redislimit: more units than the limit') end -- no wait fits them (firstFit would divide by 0)
    local start, prev, cur, at, ahead = roll(p.window, t, now)
    local el = at - start
    local fits = p.limit - cur - weigh(p, prev, el)
    if n <= fits then
      local s = {p.limit, p.window, p.cap, start, prev, cur + n}
      return true, fits - n, 0, counterResetAfter(p, s, now), 0, 0, s
    end
    local retry, rounded
    if p.limit - cur - n >= 0 then -- once the previous window weighs little enough
      retry, rounded = firstFit(p, prev, p.limit - cur - n)
      retry = retry - el
    else -- in the next window, once this one weighs little enough
      retry, rounded = firstFit(p, cur, p.limit - n)
      retry = p.window - el + retry
    end
    return false, max(fits, 0), extend(retry, ahead), counterResetAfter(p, t, now), 0, rounded
  end,
  resetAfter = counterResetAfter,
  refund = function(p, t, now, n) -- the current window's units, once rolled on to now
    local start, prev, cur = roll(p.window, t, now)
    if cur > 0 then t[4], t[5], t[6] = start, prev, cur - min(n, cur) end
  end,
  adopt = function(p, t, now)
    local start, prev, cur = roll(t[2], t, now)
    local s = {p.limit, p.window, p.cap, start, min(prev, p.limit), min(cur, p.limit)}
    s[4], s[5], s[6] = roll(p.window, s, now)
    return s
  end,
  fresh = function(p)
    return {p.limit, p.window, p.cap, 0, 0, 0}
  end,
}

---------------------------------------------------------------- sliding window log
-- {..., total, at1, n1, at2, n2, ...}, oldest first.

-- logAt returns the instant a log is decided at, now or its newest entry's
-- if later, and how far ahead of now that is.
local function logAt(t, now)
  local k = #t
  if k > 4 and now < t[k - 1] then return t[k - 1], t[k - 1] - now end
  return now, 0
end

-- logLive returns the index of t's first entry live at now under window,
-- and the units of those before it.
local function logLive(window, t, now)
  local first, units = 5, 0
  while first < #t and now - t[first] >= window do
    first, units = first + 2, units + t[first + 1]
  end
  return first, units
end

local function logResetAfter(p, t, now)
  local at, ahead = logAt(t, now)
  local age = #t > 4 and at - t[#t - 1]
  return age and age < p.window and extend(p.window - age, ahead) or 0
end

local log = {
  decide = function(p, t, now, n)
    local at, ahead = logAt(t, now)
    local first, expired = logLive(p.window, t, at)
    local live, k = t[4] - expired, #t
    if n > p.limit - live then
      local excess, retry = live + n - p.limit, 0
      for i = first, k, 2 do
        excess = excess - t[i + 1]
        if excess <= 0 then
          retry = p.window - (at - t[i])
          break
        end
      end
      return false, p.limit - live, extend(retry, ahead), logResetAfter(p, t, now), 0, 0
    end
    local s = {p.limit, p.window, p.cap, live + n}
    for i = first, k do s[i - first + 5] = t[i] end -- not by unpack: a log may hold more numbers than Lua moves at once
    k = #s
    if k > 4 and s[k - 1] == at then
      s[k] = s[k] + n
    else
      s[k + 1], s[k + 2] = at, n
    end
    return true, p.limit - live - n, 0, extend(p.window, ahead), 0, 0, s
  end,
  resetAfter = logResetAfter,
  refund = function(p, t, now, n) -- off the newest entries still in the window, newest first
    local at, k = logAt(t, now), #t
    while k > 4 and n > 0 and at - t[k - 1] < p.window do
      local take = min(n, t[k])
      t[k], t[4], n = t[k] - take, t[4] - take, n - take
      if t[k] > 0 then break end
      t[k], t[k - 1], k = nil, nil, k - 2
    end
  end,
  adopt = function(p, t, now) -- the live entries, less the oldest units past the limit, as algorithms' adopt
    local first, expired = logLive(min(t[2], p.window), t, logAt(t, now))
    local total = t[4] - expired
    local s, excess = {p.limit, p.window, p.cap, min(total, p.limit)}, total - p.limit
    for i = first, #t, 2 do
      if excess <= 0 or excess < t[i + 1] then
        s[#s + 1], s[#s + 2] = t[i], t[i + 1] - max(excess, 0)
      end
      excess = excess - t[i + 1]
    end
    return s
  end,
  fresh = function(p)
    return {p.limit, p.window, p.cap, 0}
  end,
}

local rules = {
  [TOKEN_BUCKET] = bucket, [GCRA] = bucket, [LEAKY_BUCKET] = bucket,
  [SLIDING_WINDOW_LOG] = log, [SLIDING_WINDOW_COUNTER] = counter, [FIXED_WINDOW] = fixed,
}

---------------------------------------------------------------- a key's value
-- A key's value is a byte 0xC2 (MARK), then entries, each a field (its
-- length, 2 bytes, then its bytes) and numbers (their count, 4 bytes, then
-- each a little-endian double): the states of its policies (field
-- "algorithm|name", numbers: the state's array), then the key's own entry
-- (field "@", numbers {the instant it was last written at (us), its
-- generation, the end of its hold (us; 0: none), 0, 0}), then the records of calls that changed it (field
-- "#store:call", numbers {expiry on Redis's clock (ms), the call's number,
-- its answers...}).
--
-- A request is decided at the later of its own time and the key's last
-- write, so that a key's time never goes back (a request sent before
-- another was decided may come after it). The generation is a number the
-- write that made the key's states afresh drew, kept while the key holds
-- them: a grant given back names it, and goes back only to the states it
-- was taken from, never across a Reset (which drops the entry) or a change
-- of the key's policies (a write that carries a state over to other params
-- draws another). Its five numbers (v0.2.0's had three zeros after the
-- generation, where the hold now is) are so that v0.2.0's
-- script, which keeps the states of policies it does not know while they
-- hold five numbers or more, keeps it.
local MARK = '\194' -- 0xC2

-- The algorithms by name, as fields name them ("algorithm|name").
local algs = {
  token_bucket = TOKEN_BUCKET, gcra = GCRA, leaky_bucket = LEAKY_BUCKET,
  sliding_window_log = SLIDING_WINDOW_LOG, sliding_window_counter = SLIDING_WINDOW_COUNTER, fixed_window = FIXED_WINDOW,
}

-- whole reports whether v is an integer the script computes with (NaN is
-- not: it compares false).
local function whole(v)
  return v >= 0 and v < 9007199254740992 and v % 1 == 0
end

-- doubles returns struct's format of k little-endian doubles; those of up
-- to CHUNK are made once. Lua moves at most about 8,000 values at once, so
-- numbers go by chunks of CHUNK (a log holds two an entry).
local CHUNK, formats = 512, {}
local function doubles(k)
  local f = formats[k] or '<' .. rep('d', k)
  if k <= CHUNK then formats[k] = f end
  return f
end

-- unpackNums returns the k doubles of blob from pos on, as a table, and
-- the position after them; packNums the n first numbers of t, as bytes.
local function unpackNums(blob, pos, k)
  local t = {sunpack(doubles(min(k, CHUNK)), blob, pos)}
  pos = t[#t]
  t[#t] = nil
  for i = CHUNK + 1, k, CHUNK do
    local part = {sunpack(doubles(min(CHUNK, k - i + 1)), blob, pos)}
    for j = 1, #part - 1 do t[i + j - 1] = part[j] end
    pos = part[#part]
  end
  return t, pos
end

local function packNums(t, n)
  if n <= CHUNK then return spack(doubles(n), unpack(t, 1, n)) end
  local parts = {}
  for i = 1, n, CHUNK do
    parts[#parts + 1] = spack(doubles(min(CHUNK, n - i + 1)), unpack(t, i, min(i + CHUNK - 1, n)))
  end
  return concat(parts)
end

-- entry returns the bytes of field's entry, holding the numbers t.
local function entry(field, t)
  return spack('<Hc0I4', #field, field, #t) .. packNums(t, #t)
end

-- valid reports whether t, numbers stored under field, is a state the
-- script writes: whole numbers, as many as its algorithm keeps.
local function valid(field, t)
  for k = 1, #t do
    if not whole(t[k]) then return false end
  end
  local alg = algs[field:match('^([%w_]+)|') or '']
  if alg == SLIDING_WINDOW_LOG then -- an empty log may hold 4 numbers (an earlier script left one so)
    return #t >= 4 and #t % 2 == 0 and (#t > 4 or t[4] == 0) and t[1] >= 1 and t[2] >= 1
  end
  return #t >= 5 and (not alg or (t[1] >= 1 and t[2] >= 1 and #t == (alg == SLIDING_WINDOW_COUNTER and 6 or 5)))
end

-- record reads the record that starts at pos in blob: the position after
-- it, its expiry and its name's length; nil if blob holds no whole record
-- there (or one whose expiry no script writes, which no TTL could hold).
local function record(blob, pos)
  local n = #blob
  if pos + 2 > n then return nil end
  local len, first = sunpack('<HB', blob, pos)
  if len < 1 or first ~= 35 or pos + 13 + len > n then return nil end -- '#', then its name, its count and one number at least
  local k, expiry = sunpack('<I4d', blob, pos + 2 + len)
  local stop = pos + 6 + len + 8 * k
  if k < 1 or stop - 1 > n or not whole(expiry) then return nil end
  return stop, expiry, len
end

-- parse returns a key's value, blob: its states by field, its own entry
-- (meta: {ts, gen}), and where its records start (recsAt; they are left
-- in blob until it is written, and read whole here); or nil if blob is not
-- what the script writes (another client's value: the key is corrupt). Its
-- errors (blob cut short) tell the caller's pcall so too.
local function parse(blob)
  if byte(blob) ~= 194 then return nil end
  local v, n, pos = {blob = blob, states = {}, recsAt = #blob + 1}, #blob, 2
  while pos <= n do
    local len = sunpack('<H', blob, pos)
    if len > 0 and byte(blob, pos + 2) == 35 then -- '#': the records, which come last
      v.recsAt = pos
      while pos and pos <= n do pos = record(blob, pos) end
      return pos and v
    end
    local field, k = sub(blob, pos + 2, pos + 1 + len), sunpack('<I4', blob, pos + 2 + len)
    if #field ~= len or pos + 5 + len + 8 * k > n then return nil end
    local t
    t, pos = unpackNums(blob, pos + 6 + len, k)
    if field == '@' and k == 5 and whole(t[1]) and whole(t[2]) and whole(t[3]) then
      v.meta = {ts = t[1], gen = t[2], hold = t[3]}
    elseif field ~= '@' and valid(field, t) then
      v.states[field] = t
    else
      return nil
    end
  end
  return v
end

-- policy returns a policy of the algorithm alg (negated: a dry-run one)
-- whose state is stored under field, with its params.
local function policy(alg, field, limit, window, cap, perUs, perToken)
  local a = math.abs(alg)
  return {alg = a, rule = rules[a], dry = alg < 0, field = field, limit = limit, window = window, cap = cap,
    perUs = perUs, perToken = perToken}
end

-- setOf returns the set of policies that desc describes. The sets are kept
-- by desc (a set a store sends again is made once, and found by one
-- lookup: Redis makes each argument a Lua string, the same object as an
-- equal one that lives), and let go at 1,024, since routers let sets go
-- (SetPolicies, SetOverride). A call of one request costs about 9,000
-- instructions less so (bench/redis-ir).
local sets, setsKept = {}, 0
local function setOf(desc)
  if sets[desc] then return sets[desc] end
  local set, pos = {}, 1
  while pos <= #desc do
    local alg, limit, window, cap, perUs, perToken, len = sunpack('<ddddddH', desc, pos)
    local field = sub(desc, pos + 50, pos + 49 + len)
    if #field ~= len then error('redislimit: a set of policies cut short') end
    set[#set + 1], pos = policy(alg, field, limit, window, cap, perUs, perToken), pos + 50 + len
  end
  local p = set[1]
  if #set == 1 and not p.dry and (p.alg <= LEAKY_BUCKET or p.alg == FIXED_WINDOW) then -- fast's
    set.fast = MARK .. spack('<Hc0I4ddd', #p.field, p.field, 5, p.limit, p.window, p.cap)
    set.decision = p.alg <= LEAKY_BUCKET and bucketDecision or fixedDecision
  end
  if setsKept == 1024 then sets, setsKept = {}, 0 end
  sets[desc], setsKept = set, setsKept + 1
  return set
end

-- paramsOf returns the policy of a state t stored under field that the
-- call's sets do not name (another instance's), or nil if its algorithm is
-- not one the script knows.
local function paramsOf(field, t)
  local alg = algs[field:match('^([%w_]+)|') or '']
  if not alg then return nil end
  local a, b = t[1], t[2]
  while b ~= 0 do a, b = b, a % b end
  return policy(alg, field, t[1], t[2], t[3], t[1] / a, t[2] / a)
end

---------------------------------------------------------------- a call
-- What a call works on is its table c (decideCall makes it): its
-- arguments, Redis's clock once read, the keys' values by key, parsed as
-- requests need them and kept as they change them (false: corrupt), the
-- keys written, and the answers, out[1] to out[nout].

local noCalls = {} -- the calls kept, when a call keeps none: never written

-- timeNow returns Redis's clock (us), read once a call, and notes it in ms
-- (c.clock), as the records' expiries are told.
local function timeNow(c)
  if not c.time then
    local t = rcall('TIME')
    c.time = t[1] * 1000000 + t[2] -- the strings made numbers by the arithmetic
    c.clock = floor(c.time / 1000)
  end
  return c.time
end

-- keeps reports whether the record of blob from pos to stop, expiring at
-- expiry (ms, Redis's clock), stays: until it expires, and, for one of
-- this store's, while an attempt of its call may yet come (its number not
-- below low, or kept).
local function keeps(c, blob, pos, stop, expiry)
  if expiry <= c.clock then return false end
  -- Another store's name is told apart by the last byte of its id first,
  -- so that the rest runs for about 1 in 16 of them.
  local mine = c.mine
  if byte(blob, pos + #mine) ~= c.mineLast then return true end
  local len = sunpack('<H', blob, pos)
  if len <= #mine or find(blob, mine, pos + 2, true) ~= pos + 2 or stop < pos + 22 + len then -- not this store's call
    return true
  end
  local seq = sunpack('<d', blob, pos + 14 + len)
  return seq >= c.low or c.keep[seq] == true
end

-- keptOf returns, of blob's records from pos on, those that stay, as
-- bytes, the latest expiry of them and how many they are; nil if blob
-- holds anything else from pos on.
local function keptOf(c, blob, pos)
  if not pos or pos > #blob then return '', 0, 0 end
  local parts, latest = nil, 0
  timeNow(c) -- the clock the expiries are told by
  while pos <= #blob do
    local stop, expiry = record(blob, pos)
    if not stop then return nil end -- not records
    if keeps(c, blob, pos, stop, expiry) then
      parts = parts or {}
      parts[#parts + 1], latest = sub(blob, pos, stop - 1), max(latest, expiry)
    end
    pos = stop
  end
  if not parts then return '', 0, 0 end
  return concat(parts), latest, #parts
end

-- value returns key's value, read from blob (false: none), or as the
-- call left it.
local function value(c, key, blob)
  local v = c.keys[key]
  if v and v[1] then -- fast's (an array: fast), made serve's
    local f, p = v, v[7][1]
    v = {states = {[p.field] = {p.limit, p.window, p.cap, f[1], f[2]}}, meta = {ts = f[3], gen = f[4]}, blob = f[8], -- its records that stay
      recsAt = 1, noted = true, set = f[7], now = f[3], grace = f[5], longest = f[6]}
    c.keys[key] = v
  elseif v == nil then
    v = {states = {}}
    if blob then
      local ok, parsed = pcall(parse, blob)
      v = ok and parsed or false
    end
    c.keys[key] = v
  end
  return v
end

-- note notes that v, key's value, is to be written, under set, as of now,
-- kept grace (ms) past its ResetAfter, the longest ResetAfter of its
-- writes (nil: a refund's, which keeps the key's TTL), with the key's own
-- entry {now, gen, its hold's end as it was} (none if gen is nil).
local function note(c, key, v, set, now, grace, longest, gen)
  if not v.noted then
    v.noted = true
    c.keys[#c.keys + 1] = key
  end
  local hold = v.meta and v.meta.hold or 0
  v.set, v.now, v.grace, v.meta = set, now, grace, gen and {ts = now, gen = gen, hold = hold}
  if longest then v.longest = max(v.longest or 0, longest) end
end

-- put appends x to the call's answers.
local function put(c, x)
  c.nout = c.nout + 1
  c.out[c.nout] = x
end

local notAsked = {true, 0, 0, 0, 0, 0} -- the decision of a policy that did not decide

-- serve serves one request on key, and puts its answer. gen is the
-- request's: for a give back, the generation of the grant it gives back;
-- for any other, a number drawn for the key, if it makes its states
-- afresh.
local function serve(c, key, blob, kind, n, set, now, gen)
  local v = value(c, key, blob)
  if kind == RESET then -- the states go, a corrupt value's too, and the key's own entry; its records stay
    v = v or {states = {}}
    v.states, c.keys[key] = {}, v
    return note(c, key, v, set, 0, 0, 0, nil)
  elseif not v then
    if kind ~= GIVE_BACK then put(c, -1) end -- a give back finds nothing of its own to give back
    return
  end
  local grace = c.clockGrace
  if now < 0 then -- Redis's clock
    now, grace = timeNow(c), c.ownGrace
  end
  local at = v.meta and max(now, v.meta.ts) or now -- decided at its own time, or the key's last write if later
  local held, own = v.meta and v.meta.hold or 0, now
  if kind == HOLD then -- n: how long, from its own time
    if now + n > held then -- the TTL stays, or covers the hold if longer (store)
      note(c, key, v, set, at, grace, nil, v.meta and v.meta.gen or gen)
      v.meta.hold = now + n
    end
    return put(c, 0)
  elseif held > at and kind ~= REFUND and kind ~= GIVE_BACK then -- decided as at its end, and told from it
    now, at = held, held
  else
    held = 0
  end
  local ahead, ss, changed = at - now, {}, false -- changed: a state was kept under other params, the key's policies changed
  for j, p in ipairs(set) do
    local t = v.states[p.field]
    if not t then
      t = p.rule.fresh(p, at)
    elseif not (t[1] == p.limit and t[2] == p.window and t[3] == p.cap) then
      t, changed = p.rule.adopt(p, t, at), true
    end
    ss[j] = t
  end
  local kgen = (v.meta and not changed) and v.meta.gen or gen -- the key's generation once the request is served

  if kind == REFUND or kind == GIVE_BACK then -- a policy without a state is left without one; a grant given back leaves the dry-run ones
    if kind == GIVE_BACK and gen ~= 0 and (changed or not v.meta or v.meta.gen ~= gen) then
      return -- given back to states it was not taken from: the key was Reset, or its policies changed, since
    end
    local gave = false
    for j, p in ipairs(set) do
      if v.states[p.field] and not (kind == GIVE_BACK and p.dry) then
        local t = ss[j]
        p.rule.refund(p, t, at, n)
        v.states[p.field], gave = p.rule.resetAfter(p, t, at) > 0 and t or nil, true -- none: untouched again, as a key never seen
      end
    end
    if gave then note(c, key, v, set, at, grace, nil, kgen) end
    if kind == REFUND then put(c, 0) end -- made: a refund is answered, so that one on a corrupt key can fail
    return
  end

  -- The enforced policies decide together, the dry-run ones each alone;
  -- on a key held, the enforced ones as a peek at the hold's end.
  local allowed, delay, ds = true, 0, {}
  for j, p in ipairs(set) do
    if not p.dry then
      ds[j] = (kind == DRY_RUN and notAsked) or {p.rule.decide(p, ss[j], at, n)} -- a dry run: for the dry-run policies alone
      allowed, delay = allowed and ds[j][1], max(delay, ds[j][5])
    end
  end
  local take = held == 0 and allowed and (kind == ALLOW or (kind == TURN and delay == 0))
  local longest = -1 -- the longest ResetAfter of the states taken from; -1: none
  for j, p in ipairs(set) do
    local d, takes = ds[j], take
    if not p.dry then
    elseif held > 0 or (kind == TURN and not take) then
      d = notAsked
    elseif n > p.cap then
      d = {false, 0, 0, 0, 0, 0} -- it would deny, and takes nothing
    else
      d = {p.rule.decide(p, ss[j], at, n)}
      takes = d[1] and kind ~= PEEK
    end
    if d[7] and takes then
      v.states[p.field], longest = d[7], max(longest, d[4])
    end
    ds[j] = d
  end
  if longest >= 0 then note(c, key, v, set, at, grace, longest, kgen) end
  put(c, v.meta and v.meta.gen or gen) -- the generation the key holds, if it holds one
  put(c, held > 0 and held - own or 0)
  local o, k = c.out, c.nout
  for j, p in ipairs(set) do -- each wait told from the request's own time
    local d, asIs = ds[j], 0
    if (held > 0 or not allowed and d[1]) and not p.dry then
      asIs = extend(p.rule.resetAfter(p, ss[j], at), ahead) -- nothing was taken from it
    end
    o[k + 1], o[k + 2], o[k + 3], o[k + 4], o[k + 5], o[k + 6], o[k + 7] = d[1] and 1 or 0, d[2],
      extend(d[3], ahead), extend(d[4], ahead), extend(d[5], ahead), d[6], asIs
    k = k + 7
  end
  c.nout = k
end

---------------------------------------------------------------- the fast path
-- The common request: an allow or a peek under a single bucket or fixed
-- window (set.fast), on a key that holds no value, or one that holds that
-- state alone, then the key's own entry, then records or nothing. Serve
-- alone would cost a call of 50 such requests 2.6 times the instructions
-- (bench/redis-ir).

-- fast serves an allow or a peek on key under set (set.fast), whose value
-- blob (false: none) serve has not read, or which fast wrote earlier in
-- the call under set (f, c.keys[key]), and reports whether it did: not for
-- any other value, which serve serves. An allow's state is kept in
-- c.keys[key] for storeFast.
local function fast(c, key, f, blob, kind, n, set, now, gen)
  local x, y, ts, kgen, kept, latest -- the state's numbers, the key's last write and generation, its records that stay
  if f then
    x, y, ts, kgen = f[1], f[2], f[3], f[4]
  elseif blob then
    -- The state's two numbers and the key's own entry, by one unpack: its
    -- field's length (1), its byte ('@', 64), its count (5), its numbers.
    local head = set.fast
    if #blob < #head + 63 or find(blob, head, 1, true) ~= 1 then return false end
    local len, at, count, hold
    x, y, len, at, count, ts, kgen, hold = sunpack('<ddHBI4ddd', blob, #head + 1)
    kept, latest = '', 0
    if #blob >= #head + 64 then kept, latest = keptOf(c, blob, #head + 64) end -- after the key's own entry
    -- Whole numbers, as serve's valid: written out, since a call costs
    -- more than the arithmetic.
    if not (kept and hold == 0 and len == 1 and at == 64 and count == 5 and x >= 0 and x % 1 == 0 and x < 2 ^ 53 and y >= 0 and
        y % 1 == 0 and y < 2 ^ 53 and ts >= 0 and ts % 1 == 0 and ts < 2 ^ 53 and kgen >= 0 and kgen % 1 == 0 and kgen < 2 ^ 53) then
      return false
    end
  end
  local grace = c.clockGrace
  if now < 0 then -- Redis's clock
    now, grace = c.time or timeNow(c), c.ownGrace
  end
  local at = ts and ts > now and ts or now -- as serve's
  kgen = kgen or gen
  if not x then -- a fresh state: a bucket full, whenever it was made; a window empty
    x, y = 0, set.decision == bucketDecision and at or 0
  end
  local allowed, remaining, retry, reset, delay, rounded, x2, y2 = set.decision(set[1], x, y, at, n)
  if allowed and kind == ALLOW and f then
    f[1], f[2], f[3], f[4], f[5], f[6] = x2, y2, at, kgen, grace, max(f[6], reset)
  elseif allowed and kind == ALLOW then
    c.keys[key] = {x2, y2, at, kgen, grace, reset, set, kept or '', latest or 0} -- x, y, ts, gen, grace, reset, set, kept, latest
    c.keys[#c.keys + 1] = key
  end
  local ahead, o, k = at - now, c.out, c.nout
  if ahead > 0 then -- each wait told from the request's own time
    retry, reset, delay = extend(retry, ahead), extend(reset, ahead), extend(delay, ahead)
  end
  o[k + 1], o[k + 2], o[k + 3], o[k + 4], o[k + 5], o[k + 6], o[k + 7], o[k + 8], o[k + 9] =
    kgen, 0, allowed and 1 or 0, remaining, retry, reset, delay, rounded, 0
  c.nout = k + 9
  return true
end

-- store writes key's value as the call leaves it: its set's states, in
-- order, those of policies the call does not name (another instance's)
-- while they last, its own entry, the records that stay, and the call's
-- record if key is the first written; kept for its ResetAfter and the
-- grace after, and as long as the records it holds may be asked for.
local function store(c, key, v)
  local parts, states, named, longest = {MARK}, 0, {}, v.longest or 0
  for _, p in ipairs(v.set) do
    named[p.field] = true
    if v.states[p.field] then parts[#parts + 1], states = entry(p.field, v.states[p.field]), states + 1 end
  end
  for field, t in pairs(v.states) do
    if not named[field] then
      local p, keep = paramsOf(field, t), true
      if p then -- another instance's policy: kept while it lasts
        local ok, left = pcall(p.rule.resetAfter, p, t, v.now)
        keep, longest = not ok or left > 0, ok and max(longest, left) or longest
      end
      if keep then parts[#parts + 1], states = entry(field, t), states + 1 end
    end
  end
  local holdFor = 0 -- the hold's time left and the grace after, ms
  if v.meta then -- after the states; a hold that ended goes
    local hold = v.meta.hold or 0
    if hold > v.now then holdFor = cdiv(hold - v.now, 1000) + v.grace else hold = 0 end
    parts[#parts + 1] = spack('<c0ddddd', META, v.meta.ts, v.meta.gen, hold, 0, 0)
  end
  local latest, records
  parts[#parts + 1], latest, records = keptOf(c, v.blob, v.recsAt)
  if not c.recorded then -- the call's record: {expiry, the call's number, its answers}
    c.recorded = true
    parts[#parts + 1] = spack('<Hc0I4ddc0', #c.record, c.record, c.nout + 2, c.clock + c.replay, c.seq, c.packed)
    records, latest = records + 1, max(latest, c.clock + c.replay)
  end
  local keepFor = max(latest - c.clock, holdFor) -- the records' time left, or the hold's, ms
  if states + records == 0 and not v.meta then -- a Reset's: the key is as if never seen
    rcall('DEL', key)
  elseif not v.longest and v.blob and records == 0 and holdFor == 0 then -- a refund's: the TTL stays
    rcall('SET', key, concat(parts), 'KEEPTTL')
  elseif not v.longest and v.blob then -- or the records' or the hold's if longer
    rcall('PSETEX', key, format('%d', max(rcall('PTTL', key), keepFor, 1)), concat(parts))
  else
    rcall('PSETEX', key, format('%d', max(cdiv(longest, 1000) + v.grace, keepFor, 1)), concat(parts))
  end
end

-- storeFast writes key's value as fast left it (f), as store would.
local function storeFast(c, key, f)
  local ms = f[6] / 1000
  ms = ms - ms % 1 -- cdiv(f[6], 1000), written out
  if ms * 1000 < f[6] then ms = ms + 1 end
  local px = max(ms + f[5], f[9] - c.clock, 1)
  if c.recorded then
    if px ~= c.px then -- the TTL as a string, made once for each met: a call's keys mostly share one
      c.px, c.pxs = px, format('%d', px)
    end
    return rcall('PSETEX', key, c.pxs, spack('<c0ddc0dddddc0', f[7].fast, f[1], f[2], META, f[3], f[4], 0, 0, 0, f[8]))
  end
  c.recorded = true -- the call's record, as store makes it
  rcall('PSETEX', key, format('%d', max(px, c.replay)), spack('<c0ddc0dddddc0Hc0I4ddc0', f[7].fast, f[1], f[2], META, f[3], f[4], 0, 0, 0,
    f[8], #c.record, c.record, c.nout + 2, c.clock + c.replay, c.seq, c.packed))
end

-- decideCall decides one call: KEYS and ARGV as above.
local function decideCall(KEYS, ARGV)
  if not rcall then bind() end
  local args = unpackNums(ARGV[1], 1, #ARGV[1] / 8)
  local mine = '#' .. ARGV[2] .. ':'
  local c = { -- each field made here, so that the table is made at its size once
    ownGrace = args[1], clockGrace = args[2], replay = args[3], low = args[4], seq = args[5], keep = noCalls,
    mine = mine, mineLast = byte(mine, #mine - 1), record = mine .. ARGV[3], keys = {},
    out = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nout = 1, -- the answers, out[1] to out[nout]: made at the size of one request's
    time = false, clock = false, packed = false, recorded = false, px = false, pxs = false,
  }
  local a = 7 + args[6]
  if a > 7 then
    c.keep = {}
    for i = 7, a - 1 do c.keep[args[i]] = true end
  end
  local got = rcall('MGET', unpack(KEYS))

  -- A call sent again finds its record in a key it wrote: its answers are
  -- the first time's.
  for i = 1, #KEYS do
    local blob = got[i]
    if blob and find(blob, c.record, 1, true) then
      local ok, v = pcall(parse, blob)
      local pos = ok and v and v.recsAt or #blob + 1
      while pos <= #blob do
        local stop, _, len = record(blob, pos)
        if len == #c.record and find(blob, c.record, pos + 2, true) == pos + 2 then
          return sub(blob, pos + 22 + len, stop - 1) -- past its name, count, expiry and number
        end
        pos = stop
      end
    end
  end

  local lastDesc, set -- the set of the request before: most calls have one
  for i = 1, #KEYS do
    local b, nout, key = a + (i - 1) * 5, c.nout, KEYS[i]
    local kind, n, desc, now, gen = args[b], args[b + 1], ARGV[3 + args[b + 2]], args[b + 3], args[b + 4]
    if desc ~= lastDesc then
      lastDesc, set = desc, setOf(desc)
    end
    local e = c.keys[key]
    -- fast is not under pcall: it reads nothing it has not checked.
    local ok = kind <= PEEK and set.fast and (e == nil or (e and e[7] == set)) and fast(c, key, e, got[i], kind, n, set, now, gen)
    if not ok and not pcall(serve, c, key, got[i], kind, n, set, now, gen) then
      c.nout = nout -- the key's value made the rules fail: it is corrupt
      if kind ~= RESET and kind ~= GIVE_BACK then put(c, -1) end
    end
  end
  if #c.keys == 0 then return packNums(c.out, c.nout) end
  c.out[1] = 1
  c.packed = packNums(c.out, c.nout)
  timeNow(c)
  for i = 1, #c.keys do
    local key = c.keys[i]
    local v = c.keys[key]
    if v[1] then storeFast(c, key, v) else store(c, key, v) end
  end
  return c.packed
end

return decideCall(KEYS, ARGV)
