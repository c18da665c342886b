-- chanlimit's decisions for a burst of requests: each key decided
-- atomically, under all its policies at once, by the in-memory rules of
-- package algorithms applied to whole microseconds.
--
-- KEYS     one per request: the key's Redis key, a string holding the
--          states of its policies (field "algorithm|name", numbers
--          {limit, window, capacity, the state's numbers...}) and the
--          records of calls that changed it (field "#store:call", numbers
--          {expiry on Redis's clock in ms, the call's answers...}): a byte
--          0xC2, then for each field its length (2 bytes), its bytes, its
--          count of numbers (4 bytes) and the numbers, little-endian
--          doubles (struct packs and unpacks them in C). A value an earlier
--          script wrote with cmsgpack ({field, numbers, ...}) is read too.
-- ARGV     1: the numbers, little-endian doubles: the grace kept past a
--          key's ResetAfter, in milliseconds, on Redis's clock and on the
--          caller's; how long a record is kept (ms); the lowest call of
--          the store's that its client may still send, and the number of
--          calls below it that Redis may yet run, then those; the number
--          of sets of policies, then each set: its number of policies,
--          then for each: algorithm (1 token_bucket, 2 gcra,
--          3 leaky_bucket, 4 sliding_window_log, 5 sliding_window_counter,
--          6 fixed_window; negated for a dry-run policy), limit, window
--          (us), capacity, units refilled per microsecond, units in a token
--          (the buckets'; 0 for the others); then for each request: kind
--          (1 allow, 2 peek, 3 refund, 4 reset, 5 turn, 6 give back,
--          7 dry run), n, its set, now in microseconds (-1: Redis's own
--          clock, TIME).
--          A dry-run policy decides each allow, peek and granted turn
--          alone, as if it were the key's only policy, taking if it allows
--          (not on a peek); the others decide together. A turn is a
--          waiter's: the dry-run policies decide it only if the others
--          grant it with no delay. A give back is a refund to the policies
--          that are not dry-run. A dry run is decided by the dry-run
--          policies alone, as an allow is: a request callers waiting on
--          its key refused.
--          2: the store's id; 3: the call's number; then the fields of
--          the sets' policies, in order.
--
-- Returns 1 if the call changed a key, else 0; then, request after
-- request, for an allow, a peek, a refund, a turn or a dry run: -1 if
-- the key holds a value
-- the script did not write (the key is corrupt: its requests fail, the
-- others are decided), or allowed (by the policies that are not dry-run),
-- then for each policy: allowed, remaining, retry after, reset after,
-- delay (us), and by how many ns its retry after was rounded up (a
-- dry-run policy that did not decide says allowed); for a refund, 0;
-- nothing for a reset or a give back.
--
-- A call that changes a key leaves its answers in the first key it
-- leaves a state in, which lives as long as the client may send the call
-- again: a call the client sends again (go-redis retries a pipeline after
-- a read timeout, and a stalled Redis runs every attempt once it wakes)
-- finds them and answers as the first time, deciding nothing twice. The
-- store's own records are let go once its client cannot send their call
-- again. A key's value keeps the states of policies the call does not
-- name (another instance's, during a rolling deploy) while they last.
--
-- Lua numbers are doubles: every value here is an integer below 2^53
-- (redislimit's Check bounds the policies so), and every division goes
-- through idiv, which is exact.

-- This file is run two ways. As a script (EVAL), whole, at every call:
-- its last line calls decideCall. As a Redis Function (Redis 7 and
-- later), it is a library, loaded once: redislimit puts the library's
-- header before it and registers decideCall in place of its last line,
-- so that the functions above decideCall are made once, not at every
-- call. Nothing but caches of what never changes outlives a call.

-- The library functions, as locals: a local is found at once, a global
-- through two tables. They are bound by the first call (bind), since a
-- library is loaded where none of them exists.
local floor, max, min
local sub, byte, find, match, rep
local spack, sunpack
local rcall

local function bind()
  floor, max, min = math.floor, math.max, math.min
  sub, byte, find, match, rep = string.sub, string.byte, string.find, string.match, string.rep
  spack, sunpack = struct.pack, struct.unpack
  rcall = redis.call
end

-- floor(a / b) for integers 0 <= a < 2^53, 0 < b.
local function idiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

-- ceil(a / b), likewise.
local function cdiv(a, b)
  local q = idiv(a, b)
  if q * b < a then
    q = q + 1
  end
  return q
end

-- atLeast reports whether c * p >= 1000 * b, exactly, for integers
-- 0 <= c <= 1001 and 0 <= b, p < 2^53: each product is taken in limbs of
-- 2^26, whose partial products stay below 2^53.
local LIMB = 67108864 -- 2^26
local function atLeast(c, p, b)
  local ph, pl = math.floor(p / LIMB), p % LIMB
  local bh, bl = math.floor(b / LIMB), b % LIMB
  local xh, xl = c * ph, c * pl
  local yh, yl = 1000 * bh, 1000 * bl
  xh, xl = xh + math.floor(xl / LIMB), xl % LIMB
  yh, yl = yh + math.floor(yl / LIMB), yl % LIMB
  return xh > yh or (xh == yh and xl >= yl)
end

-- ceilMilli returns ceil(1000 * b / p) for integers 0 <= b < p < 2^53:
-- in [0, 1000], exactly, though 1000 * b may pass 2^53.
local function ceilMilli(b, p)
  if b == 0 then
    return 0
  end
  local c = math.min(math.ceil(1000 * (b / p)), 1000) -- within one of it
  while not atLeast(c, p, b) do
    c = c + 1
  end
  while c > 1 and atLeast(c - 1, p, b) do
    c = c - 1
  end
  return c
end

-- The waits are whole microseconds, rounded up from the in-memory rules'
-- nanoseconds; a wait's sub tells by how many nanoseconds it was (in
-- [0, 999]), so that the caller picks the policy with the longest wait as
-- memory does, however close.

-- extend lengthens a wait by ahead, as algorithms' extend does.
local function extend(wait, ahead)
  if wait <= 0 then
    return wait
  end
  return wait + ahead
end

---------------------------------------------------------------- buckets
-- token_bucket, gcra and leaky_bucket: used units at last (us); a token is
-- perToken units, perUs units refill each microsecond, a full bucket is
-- cap tokens. State: {limit, window, cap, used, last}.

-- bucketUsed returns a bucket's used units at now, refilled since last,
-- the instant it is decided at (last, if now is before it) and how far
-- ahead of now that is.
local function bucketUsed(p, used, last, now)
  local at, ahead = now, 0
  if now < last then
    at, ahead = last, last - now
  end
  local el = at - last
  if el > 0 and used > 0 then
    if el >= cdiv(used, p.perUs) then
      used = 0
    else
      used = used - el * p.perUs
    end
  end
  return used, at, ahead
end

-- bucketDecision decides n units on a bucket that had used units at
-- last, at now: allowed, remaining, retry after, reset after, delay, the
-- retry's rounding in ns, and if allowed the state after (used, last).
local function bucketDecision(p, used, last, now, n)
  local at, ahead
  used, at, ahead = bucketUsed(p, used, last, now)
  local full, need = p.cap * p.perToken, n * p.perToken
  local free = full - used
  if free < need then
    local deficit = used + need - full
    local r = deficit - idiv(deficit, p.perUs) * p.perUs
    return false, idiv(free, p.perToken), extend(cdiv(deficit, p.perUs), ahead), extend(cdiv(used, p.perUs), ahead),
      0, r > 0 and 1000 - ceilMilli(r, p.perUs) or 0
  end
  local delay = 0
  if p.alg == 3 then
    delay = cdiv(used, p.perUs) + ahead -- leaky_bucket: its turn, once the units queued ahead have drained
  end
  return true, idiv(free - need, p.perToken), 0, extend(cdiv(used + need, p.perUs), ahead), delay, 0, used + need, at
end

local function bucketDecide(p, s, now, n, d)
  local used, last
  d.allowed, d.remaining, d.retry, d.reset, d.delay, d.sub, used, last = bucketDecision(p, s.used, s.last, now, n)
  if d.allowed then
    d.commit = {used = used, last = last}
  end
end

local function bucketResetAfter(p, s, now)
  local used, _, ahead = bucketUsed(p, s.used, s.last, now)
  return extend(cdiv(used, p.perUs), ahead)
end

local function bucketRefund(p, s, n)
  s.used = max(s.used - n * p.perToken, 0)
end

-- bucketAdopt carries a state saved under other params (old: limit,
-- window, cap) over to p's, as algorithms' bucket adopt does: whole free
-- tokens kept, capped at the capacity, and the part of a token.
local function bucketAdopt(p, s, old, now)
  local a, b = old.limit, old.window
  while b ~= 0 do a, b = b, a % b end
  local perUs, perToken = old.limit / a, old.window / a
  local used = bucketUsed({perUs = perUs}, s.used, s.last, now)
  local at = max(now, s.last)
  local free = old.cap * perToken - used
  local q = idiv(free, perToken)
  local r = free - q * perToken
  if q >= p.cap then
    return {used = 0, last = at}
  end
  local part = idiv(r * p.perToken, perToken)
  return {used = p.cap * p.perToken - (q * p.perToken + part), last = at}
end

---------------------------------------------------------------- fixed window
-- State: {limit, window, 0, start, count}.

local function fixedAt(s, now)
  if s.count > 0 and now < s.start then
    return s.start, s.start - now
  end
  return now, 0
end

-- fixedDecision decides n units on a window that started at start with
-- count units, at now: allowed, remaining, retry after, reset after, and
-- if allowed the state after (start, count).
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
    return false, p.limit - c, left, left
  end
  return true, p.limit - c - n, 0, left, start, c + n
end

local function fixedDecide(p, s, now, n, d)
  local start, count
  d.allowed, d.remaining, d.retry, d.reset, start, count = fixedDecision(p, s.start, s.count, now, n)
  d.delay = 0
  if d.allowed then
    d.commit = {start = start, count = count}
  end
end

local function fixedResetAfter(p, s, now)
  if s.count == 0 then
    return 0
  end
  local at, ahead = fixedAt(s, now)
  local open = at - s.start
  if open < p.window then
    return extend(p.window - open, ahead)
  end
  return 0
end

---------------------------------------------------------------- sliding window counter
-- State: {limit, window, 0, start, prev, cur}.

local function roll(p, s, now)
  local w = {now = now, start = s.start, prev = s.prev, cur = s.cur}
  local ahead = 0
  if w.prev > 0 or w.cur > 0 then
    if now < s.start then
      w.now, ahead = s.start, s.start - now
    end
    local el = w.now - w.start
    if el < p.window then
    elseif el - p.window < p.window then
      w.start = w.start + p.window
      w.prev, w.cur = w.cur, 0
    else
      w.prev, w.cur = 0, 0
    end
  end
  if w.prev == 0 and w.cur == 0 then
    w.start = w.now
  end
  return w, ahead
end

-- weigh is floor(prev * (Window - 1ns - elapsed) / Window) in nanoseconds,
-- for elapsed and Window in whole microseconds.
local function weigh(p, prev, el)
  local a = prev * (p.window - el)
  local q = idiv(a, p.window)
  if 1000 * (a - q * p.window) >= prev then
    return q
  end
  return q - 1
end

-- fitsAt returns the first elapsed (us, rounded up from the nanosecond)
-- at which weigh(prev, elapsed) <= room, as algorithms' firstFit.
-- It returns too the wait's sub: by how many nanoseconds it was rounded.
local function firstFit(p, prev, room)
  if prev <= room then
    return 0, 0
  end
  -- In nanoseconds, Window - ceil((room + 1) * Window / prev).
  local x = (room + 1) * p.window
  local q = idiv(x, prev)
  local k = ceilMilli(x - q * prev, prev)
  if k == 1000 then
    return p.window - q - 1, 0
  end
  return p.window - q, k
end

local function counterDecide(p, s, now, n, d)
  local w, ahead = roll(p, s, now)
  local el = w.now - w.start
  local cur = w.cur
  local fits = p.limit - w.cur - weigh(p, w.prev, el)
  d.delay, d.retry, d.reset = 0, 0, 0
  if n > fits then
    d.allowed = false
    d.remaining = max(fits, 0)
    local room = p.limit - w.cur - n
    if room >= 0 then
      local ff, sub = firstFit(p, w.prev, room)
      d.retry, d.sub = ff - el, sub
    else
      local ff, sub = firstFit(p, w.cur, p.limit - n)
      d.retry, d.sub = p.window - el + ff, sub
    end
  else
    d.allowed = true
    d.remaining = fits - n
    cur = cur + n
    d.commit = {start = w.start, prev = w.prev, cur = cur}
  end
  if cur > 0 then
    d.reset = p.window - el + p.window
  elseif w.prev > 0 then
    d.reset = p.window - el
  end
  d.retry, d.reset = extend(d.retry, ahead), extend(d.reset, ahead)
end

local function counterResetAfter(p, s, now)
  local w, ahead = roll(p, s, now)
  local el = w.now - w.start
  if w.cur > 0 then
    return extend(p.window - el + p.window, ahead)
  elseif w.prev > 0 then
    return extend(p.window - el, ahead)
  end
  return 0
end

---------------------------------------------------------------- sliding window log
-- State: {limit, window, 0, total, at1, n1, at2, n2, ...}, oldest first.

local function logAt(s, now)
  local k = #s.entries
  if k > 0 and now < s.entries[k][1] then
    return s.entries[k][1], s.entries[k][1] - now
  end
  return now, 0
end

local function logExpired(window, s, now)
  local first, units = 1, 0
  while first <= #s.entries and now - s.entries[first][1] >= window do
    units = units + s.entries[first][2]
    first = first + 1
  end
  return first, units
end

local function logDecide(p, s, now, n, d)
  local at, ahead = logAt(s, now)
  local first, expired = logExpired(p.window, s, at)
  local live = s.total - expired
  d.delay = 0
  if n > p.limit - live then
    local excess = live + n - p.limit
    local retry = 0
    for i = first, #s.entries do
      excess = excess - s.entries[i][2]
      if excess <= 0 then
        retry = p.window - (at - s.entries[i][1])
        break
      end
    end
    d.allowed, d.remaining, d.retry = false, p.limit - live, retry
    d.reset = p.window - (at - s.entries[#s.entries][1])
  else
    d.allowed, d.remaining, d.retry, d.reset = true, p.limit - live - n, 0, p.window
    local entries = {}
    for i = first, #s.entries do
      entries[#entries + 1] = {s.entries[i][1], s.entries[i][2]}
    end
    local k = #entries
    if k > 0 and entries[k][1] == at then
      entries[k][2] = entries[k][2] + n
    else
      entries[k + 1] = {at, n}
    end
    d.commit = {total = live + n, entries = entries}
  end
  d.retry, d.reset = extend(d.retry, ahead), extend(d.reset, ahead)
end

local function logResetAfter(p, s, now)
  local k = #s.entries
  if k == 0 then
    return 0
  end
  local newest = s.entries[k][1]
  local at, ahead = logAt(s, now)
  local age = at - newest
  if age < p.window then
    return extend(p.window - age, ahead)
  end
  return 0
end

-- logRefund takes n units off the newest entries still in the window at
-- now, newest first.
local function logRefund(p, s, now, n)
  local at = logAt(s, now)
  local k = #s.entries
  while k > 0 and n > 0 and at - s.entries[k][1] < p.window do
    local e = s.entries[k]
    local take = min(n, e[2])
    e[2], s.total, n = e[2] - take, s.total - take, n - take
    if e[2] > 0 then
      break
    end
    s.entries[k] = nil
    k = k - 1
  end
end

-- fresh returns the untouched state of p's algorithm.
local function fresh(p)
  if p.alg <= 3 then
    return {used = 0, last = 0, fresh = true}
  elseif p.alg == 4 then
    return {total = 0, entries = {}}
  elseif p.alg == 5 then
    return {start = 0, prev = 0, cur = 0}
  end
  return {start = 0, count = 0}
end

-- load returns p's state at now: as stored, carried over to p's params if
-- it was saved under others (SetPolicies), or fresh.
local function load(p, t, now)
  if not t then
    return fresh(p)
  end
  local s
  if p.alg <= 3 then
    s = {used = t[4], last = t[5]}
  elseif p.alg == 4 then
    s = {total = t[4], entries = {}}
    for i = 5, #t, 2 do
      s.entries[#s.entries + 1] = {t[i], t[i + 1]}
    end
  elseif p.alg == 5 then
    s = {start = t[4], prev = t[5], cur = t[6]}
  else
    s = {start = t[4], count = t[5]}
  end
  if t[1] == p.limit and t[2] == p.window and t[3] == p.cap then
    return s
  end
  local old = {limit = t[1], window = t[2], cap = t[3]}
  if p.alg <= 3 then
    return bucketAdopt(p, s, old, now)
  elseif p.alg == 4 then
    local at = logAt(s, now)
    local first, expired = logExpired(min(old.window, p.window), s, at)
    local total = s.total - expired
    local excess = total - p.limit
    while excess > 0 do
      local e = s.entries[first]
      if e[2] > excess then
        e[2] = e[2] - excess
        break
      end
      excess = excess - e[2]
      first = first + 1
    end
    local entries = {}
    for i = first, #s.entries do
      entries[#entries + 1] = s.entries[i]
    end
    return {total = min(total, p.limit), entries = entries}
  elseif p.alg == 5 then
    local w = roll({window = old.window}, s, now)
    s = {start = w.start, prev = min(w.prev, p.limit), cur = min(w.cur, p.limit)}
    w = roll(p, s, now)
    if w.prev == 0 and w.cur == 0 then
      return fresh(p)
    end
    return {start = w.start, prev = w.prev, cur = w.cur}
  end
  if fixedResetAfter(old, s, now) == 0 then
    return fresh(p)
  end
  s.count = min(s.count, p.limit)
  if fixedResetAfter(p, s, now) == 0 then
    return fresh(p)
  end
  return s
end

-- pack returns p's state s, as it is stored.
local function pack(p, s)
  local t = {p.limit, p.window, p.cap}
  if p.alg <= 3 then
    t[4], t[5] = s.used, s.last
  elseif p.alg == 4 then
    t[4] = s.total
    for _, e in ipairs(s.entries) do
      t[#t + 1] = e[1]
      t[#t + 1] = e[2]
    end
  elseif p.alg == 5 then
    t[4], t[5], t[6] = s.start, s.prev, s.cur
  else
    t[4], t[5] = s.start, s.count
  end
  return t
end

local function decide(p, s, now, n, d)
  if p.alg <= 3 then
    bucketDecide(p, s, now, n, d)
  elseif p.alg == 4 then
    logDecide(p, s, now, n, d)
  elseif p.alg == 5 then
    counterDecide(p, s, now, n, d)
  else
    fixedDecide(p, s, now, n, d)
  end
end

local function resetAfter(p, s, now)
  if p.alg <= 3 then
    return bucketResetAfter(p, s, now)
  elseif p.alg == 4 then
    return logResetAfter(p, s, now)
  elseif p.alg == 5 then
    return counterResetAfter(p, s, now)
  end
  return fixedResetAfter(p, s, now)
end


-- The algorithms by name, as fields name them ("algorithm|name").
local algs = {
  token_bucket = 1, gcra = 2, leaky_bucket = 3,
  sliding_window_log = 4, sliding_window_counter = 5, fixed_window = 6,
}

-- paramsOf returns the params of a state t stored under field that the
-- call's sets do not have (another instance's policy), or nil if its
-- algorithm is not one the script knows.
local algOfField = {} -- the algorithm of each field met in a call, false for one the script does not know: emptied by each call
local function algOf(field)
  local alg = algOfField[field]
  if alg == nil then
    alg = algs[match(field, '^([%w_]+)|') or ''] or false
    algOfField[field] = alg
  end
  return alg or nil
end

local function paramsOf(field, t)
  local alg = algOf(field)
  if not alg then
    return nil
  end
  local p = {alg = alg, limit = t[1], window = t[2], cap = t[3], perUs = 0, perToken = 0}
  if alg <= 3 then
    local a, b = p.limit, p.window
    while b ~= 0 do a, b = b, a % b end
    p.perUs, p.perToken = p.limit / a, p.window / a
  end
  return p
end

-- whole reports whether v is an integer the script computes with (NaN is
-- not: it compares false).
local function whole(v)
  return type(v) == 'number' and v >= 0 and v < 9007199254740992 and v % 1 == 0
end

-- valid reports whether t, numbers stored under field, is a state the
-- script writes: whole numbers, as many as its algorithm keeps.
local function valid(field, t)
  for k = 1, #t do
    local v = t[k]
    if not (v >= 0 and v < 9007199254740992 and v % 1 == 0) then
      return false
    end
  end
  local alg = algOf(field)
  if #t < 5 and not (alg == 4 and #t == 4 and t[4] == 0) -- an empty log, as an earlier script left one a grant given back emptied
      or (alg and (t[1] < 1 or t[2] < 1)) or (alg == 4 and #t % 2 ~= 0)
      or (alg and alg ~= 4 and #t ~= (alg == 5 and 6 or 5)) then
    return false
  end
  return true
end

-- A key's value is a byte 0xC2, then entries: a field (its length, two
-- bytes, then its bytes) and its numbers (their count, four bytes, then
-- each a little-endian double). struct packs and unpacks them in C.
local MARK = '\194' -- 0xC2

-- packNums returns the numbers t as doubles, and unpackNums the k
-- doubles of blob from pos on, as a table, and the position after them:
-- by chunks, since Lua moves at most about 8,000 values at once (a log
-- holds two numbers an entry).
local CHUNK = 512

-- dfmtOf returns struct's format of k doubles, '<' and k 'd's: kept for
-- up to CHUNK of them, the most a chunk holds.
local dfmt = {}
local function dfmtOf(k)
  local f = dfmt[k]
  if not f then
    f = '<' .. rep('d', k)
    if k <= CHUNK then
      dfmt[k] = f
    end
  end
  return f
end
local function packNums(t)
  if #t <= CHUNK then
    return spack(dfmtOf(#t), unpack(t))
  end
  local parts = {}
  for i = 1, #t, CHUNK do
    local j = min(i + CHUNK - 1, #t)
    parts[#parts + 1] = spack(dfmtOf(j - i + 1), unpack(t, i, j))
  end
  return table.concat(parts)
end

local function unpackNums(blob, pos, k)
  if k <= CHUNK then -- at once, into the table it returns
    local t = {sunpack(dfmtOf(k), blob, pos)}
    pos = t[k + 1]
    t[k + 1] = nil
    return t, pos
  end
  local t = {}
  while #t < k do
    local c = min(CHUNK, k - #t)
    local part = {sunpack(dfmtOf(c), blob, pos)}
    pos = part[c + 1]
    for i = 1, c do
      t[#t + 1] = part[i]
    end
  end
  return t, pos
end

-- entry returns the bytes of field's entry, holding the numbers t.
local function entry(field, t)
  return spack('<H', #field) .. field .. spack('<I4', #t) .. packNums(t)
end

-- parseOld parses a value an earlier version of the script wrote, packed
-- with cmsgpack as {field, numbers, ...}.
local function parseOld(blob)
  local ok, t = pcall(cmsgpack.unpack, blob)
  if not ok or type(t) ~= 'table' or #t % 2 ~= 0 then
    return nil
  end
  local states, records = {}, {}
  for i = 1, #t, 2 do
    local field, v = t[i], t[i + 1]
    if type(field) ~= 'string' or type(v) ~= 'table' then
      return nil
    end
    if byte(field) == 35 then
      if not whole(v[1]) then
        return nil
      end
      records[field] = {v[1], entry(field, v)}
    elseif valid(field, v) then
      states[field] = v
    else
      return nil
    end
  end
  return {states = states, records = records}
end

-- parseNew parses blob, or raises an error if it ends short.
local function parseNew(blob)
  local states, records = {}, {}
  local n, pos = #blob, 2
  while pos <= n do
    local start = pos
    local len
    len, pos = sunpack('<H', blob, pos)
    local field = sub(blob, pos, pos + len - 1)
    if #field ~= len then
      return nil
    end
    local k
    k, pos = sunpack('<I4', blob, pos + len)
    if pos + 8 * k - 1 > n then
      return nil
    end
    if byte(field) == 35 then -- '#': a call's record, kept as its bytes
      local expiry = sunpack('<d', blob, pos)
      pos = pos + 8 * k
      records[field] = {expiry, sub(blob, start, pos - 1)}
    else
      local t
      t, pos = unpackNums(blob, pos, k)
      if not valid(field, t) then
        return nil
      end
      states[field] = t
    end
  end
  return {states = states, records = records}
end

-- parse returns the fields of a key's value, blob: states by field, and
-- records by name ({expiry, bytes}); or nil if blob is not what the
-- script writes (another client's value: the key is corrupt).
local function parse(blob)
  local ok, v = pcall(sub(blob, 1, 1) == MARK and parseNew or parseOld, blob)
  if ok then
    return v
  end
  return nil
end

-- decideCall decides one call: KEYS and ARGV as above.
-- answering reports whether a request of kind is answered: an allow, a
-- peek, a refund, a turn or a dry run.
local function answering(kind)
  return kind <= 3 or kind == 5 or kind == 7
end

local function decideCall(KEYS, ARGV)
  if not rcall then
    bind()
  end
  algOfField = {}

  -- The arguments: the numbers, packed as doubles in ARGV[1]; the store's
  -- id, the call's number and the policies' fields, strings.
  local args = unpackNums(ARGV[1], 1, #ARGV[1] / 8)
  local ownGrace, clockGrace, replay, low = args[1], args[2], args[3], args[4]
  local me, call = ARGV[2], ARGV[3]
  local nkeep = args[5]
  local keep = {} -- this store's calls below low that may yet run again: their records stay
  for i = 1, nkeep do
    keep[args[5 + i]] = true
  end
  local a = 6 + nkeep

  -- The keys' values, read at once, by key (two requests of one call may
  -- be on one key).
  local raw = {}
  do
    local got = rcall('MGET', unpack(KEYS))
    for i, key in ipairs(KEYS) do
      raw[key] = got[i]
    end
  end

  -- A call the client sent again (go-redis retries a pipeline after a read
  -- timeout) finds its record in a key it wrote: its answers are the first
  -- time's, and nothing is decided twice.
  local mine = '#' .. me .. ':'
  local record = mine .. call
  for _, key in ipairs(KEYS) do
    local blob = raw[key]
    if blob and find(blob, record, 1, true) then
      local v = parse(blob)
      local r = v and v.records[record]
      if r then
        local bytes = r[2]
        local len = sunpack('<H', bytes, 1)
        local k, pos = sunpack('<I4', bytes, 3 + len)
        local t = unpackNums(bytes, pos, k)
        local answers = {}
        for j = 2, k do -- not unpack: a large call answers more numbers than Lua moves at once
          answers[j - 1] = t[j]
        end
        return answers
      end
    end
  end

  -- The sets of policies.
  local sets = {}
  local f = 4 -- the next field in ARGV
  for i = 1, args[a] do
    local set = {}
    a = a + 1
    for j = 1, args[a] do
      local b = a + (j - 1) * 6
      local alg = args[b + 1] -- negative: a dry-run policy's
      set[j] = {
        alg = math.abs(alg), dry = alg < 0, field = ARGV[f], limit = args[b + 2], window = args[b + 3],
        cap = args[b + 4], perUs = args[b + 5], perToken = args[b + 6],
      }
      f = f + 1
    end
    a = a + #set * 6
    local p = set[1]
    if #set == 1 and not p.dry and (p.alg <= 3 or p.alg == 6) then
      -- The common case, served without decoding (serveFast): the bytes its
      -- state starts with, in a value the script wrote.
      set.fast = MARK .. spack('<H', #p.field) .. p.field .. spack('<I4ddd', 5, p.limit, p.window, p.cap)
    end
    sets[i] = set
  end
  a = a + 1

  local redisNow -- Redis's clock, in microseconds: read once, if needed
  local function timeNow()
    if not redisNow then
      local t = rcall('TIME')
      redisNow = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    return redisNow
  end

  -- The keys' values, parsed as the requests need them and kept as they
  -- change them: false for a corrupt one. The keys written, in order, with
  -- for each its set, the time of its latest request, its grace, and the
  -- longest ResetAfter of its writes (nil: a refund's, which keeps the
  -- key's TTL).
  local vals = {}
  local written, wrote = {}, {}
  local fast = {} -- serveFast's writes, by key: the state's two numbers, the records after, grace, ResetAfter, set
  local out = {0} -- first: 1 if the call wrote, so that its answers are kept
  local taking = false -- the call took or gave back units, or decided beside a reset: its answers are kept (recordOf)

  local function value(key)
    local v = vals[key]
    local f = fast[key]
    if v == nil and f then -- serveFast's write, as serve keeps it
      local p = f[6][1]
      v = {states = {[p.field] = {p.limit, p.window, p.cap, f[1], f[2]}}, records = {}, rest = f[3]}
      vals[key], fast[key] = v, nil
      wrote[key] = {set = f[6], now = 0, grace = f[4], longest = f[5]}
      return v
    end
    if v == nil then
      if raw[key] then
        v = parse(raw[key]) or false
      else
        v = {states = {}, records = {}}
      end
      vals[key] = v
    end
    return v
  end

  local function note(key, set, now, grace, longest)
    local w = wrote[key]
    if not w then
      w = {}
      wrote[key] = w
      written[#written + 1] = key
    end
    w.set, w.now, w.grace = set, now, grace
    if longest then
      w.longest = max(w.longest or 0, longest)
    end
  end

  -- allRecords reports whether rest, a value's bytes after its states, is
  -- whole records, and nothing else.
  local function allRecords(rest)
    local n, pos = #rest, 1
    while pos <= n do
      if pos + 1 > n then
        return false
      end
      local len = sunpack('<H', rest, pos)
      if byte(rest, pos + 2) ~= 35 or pos + 5 + len > n then
        return false
      end
      pos = pos + 6 + len + 8 * sunpack('<I4', rest, pos + 2 + len)
      if pos - 1 > n then
        return false
      end
    end
    return true
  end

  -- serveFast serves an allow or a peek on key, not touched yet in this
  -- call, under set, a single bucket or fixed window, whose value holds its
  -- state alone, first, then records or nothing: as serve would, reading
  -- the two numbers of its state in place. It returns nil for any other
  -- value, for serve.
  local function serveFast(key, kind, n, set, now)
    local p, head = set[1], set.fast
    local blob = raw[key]
    local x, y, rest -- the state's numbers (a bucket's used and last, a window's start and count); the records after
    local f = fast[key]
    if f then -- written earlier in this call
      x, y, rest, blob = f[1], f[2], f[3], nil
    elseif blob then
      if #blob < #head + 16 or find(blob, head, 1, true) ~= 1 then
        return nil
      end
      x, y = sunpack('<dd', blob, #head + 1)
      if not (x >= 0 and x % 1 == 0 and y >= 0 and y % 1 == 0 and x < 9007199254740992 and y < 9007199254740992) then
        return nil
      end
      rest = sub(blob, #head + 17)
      if rest ~= '' and not allRecords(rest) then -- another entry than a record follows, or a broken one: serve's
        return nil
      end
    end
    local grace = clockGrace
    if now < 0 then
      now, grace = timeNow(), ownGrace
    end
    local allowed, remaining, retry, reset, delay, rounded = false, 0, 0, 0, 0, 0
    if p.alg <= 3 then
      allowed, remaining, retry, reset, delay, rounded, x, y = bucketDecision(p, x or 0, y or now, now, n) -- a fresh bucket is full, whenever it was made
    else
      allowed, remaining, retry, reset, x, y = fixedDecision(p, x or 0, y or 0, now, n)
    end
    if allowed and kind == 1 then
      if not fast[key] then
        written[#written + 1] = key
      end
      taking = true
      fast[key] = {x, y, rest or '', grace, reset, set}
    end
    local a = allowed and 1 or 0
    local o = #out
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] = a, a, remaining, retry, reset, delay, rounded
    return true -- answered, in out
  end

  -- serve serves one request on key, and returns its answer:
  -- nil for a refund or a reset; {-1} if the key holds a value the script
  -- did not write; otherwise allowed, then for each policy allowed,
  -- remaining, retry after, reset after, delay.
  local function serve(key, kind, n, set, now)
    local v = value(key)
    if kind == 4 then
      -- The states go, a corrupt value too; the records stay: they are
      -- about calls, not the key.
      vals[key] = {states = {}, records = v and v.records or {}, rest = v and v.rest}
      note(key, set, 0, 0, 0)
      return nil
    end
    if not v then
      return answering(kind) and {-1} or nil -- a refund finds nothing of its own to give back
    end
    local grace = clockGrace
    if now < 0 then
      now, grace = timeNow(), ownGrace
    end
    local ss = {}
    for j, p in ipairs(set) do
      local s = load(p, v.states[p.field], now)
      if s.fresh then
        s.last = now -- a fresh bucket is full, whenever it was made
      end
      ss[j] = s
    end

    if kind == 3 or kind == 6 then -- refund: a policy without a state is left without one; a grant given back (6) leaves the dry-run ones
      local gave = false
      for j, p in ipairs(set) do
        if v.states[p.field] and not (kind == 6 and p.dry) then
          local s = ss[j]
          if p.alg <= 3 then
            bucketRefund(p, s, n)
          elseif p.alg == 4 then
            logRefund(p, s, now, n)
          elseif p.alg == 5 then -- the current window's units, once rolled on to now
            local w = roll(p, s, now)
            if w.cur > 0 then
              s.start, s.prev, s.cur = w.start, w.prev, w.cur - min(n, w.cur)
            end
          elseif fixedResetAfter(p, s, now) > 0 then -- a window open at now
            s.count = s.count - min(n, s.count)
          end
          if resetAfter(p, s, now) > 0 then
            v.states[p.field] = pack(p, s)
          else
            v.states[p.field] = nil -- untouched again: no state, as for a key never seen
          end
          gave = true
        end
      end
      if gave then
        note(key, set, now, grace, nil)
        taking = true
      end
      if kind == 3 then
        return {0} -- made: a refund is answered, so that one on a corrupt key can fail
      end
      return nil
    end

    -- The enforced policies decide together; the dry-run ones each alone,
    -- taking if they allow (an allow), or if the others grant the turn now
    -- (a turn), or taking nothing (a peek).
    local allowed, delay = true, 0
    local ds = {}
    for j, p in ipairs(set) do
      if p.dry then
      elseif kind == 7 then -- a request a line refused: for the dry-run policies alone
        ds[j] = {allowed = true, remaining = 0, retry = 0, reset = 0, delay = 0}
      else
        local d = {}
        decide(p, ss[j], now, n, d)
        ds[j] = d
        allowed, delay = allowed and d.allowed, max(delay, d.delay)
      end
    end
    local dryDecides = kind ~= 5 or (allowed and delay == 0)
    for j, p in ipairs(set) do
      if p.dry then
        if not dryDecides then
          ds[j] = {allowed = true, remaining = 0, retry = 0, reset = 0, delay = 0} -- not asked
        elseif n > p.cap then
          ds[j] = {allowed = false, remaining = 0, retry = 0, reset = 0, delay = 0} -- it would deny, and takes nothing
        else
          local d = {}
          decide(p, ss[j], now, n, d)
          d.take = d.allowed and kind ~= 2
          ds[j] = d
        end
      end
    end
    local r = {allowed and 1 or 0}
    for j, p in ipairs(set) do
      local d = ds[j]
      if not allowed and d.allowed and not p.dry then
        -- A policy that would have allowed reports its state as it is.
        d.remaining = d.remaining + n
        d.reset = resetAfter(p, ss[j], now)
        d.delay = 0
      end
      r[#r + 1] = d.allowed and 1 or 0
      r[#r + 1] = d.remaining
      r[#r + 1] = d.retry
      r[#r + 1] = d.reset
      r[#r + 1] = d.delay
      r[#r + 1] = d.sub or 0
    end
    -- Last: a key the rules fail on is left as it was.
    local took, longest = false, 0
    for j, p in ipairs(set) do
      local d = ds[j]
      if (p.dry and d.take) or (not p.dry and allowed and (kind == 1 or kind == 5)) then
        v.states[p.field] = pack(p, d.commit)
        took, longest = true, max(longest, d.reset)
      end
    end
    if took then
      note(key, set, now, grace, longest)
      taking = true
    end
    return r
  end

  local decides = false -- an op of the call is not a reset
  for i = 1, #KEYS do
    local b = a + (i - 1) * 4
    local kind = args[b]
    if kind ~= 4 then
      decides = true
    end
    local key, n, set, now = KEYS[i], args[b + 1], sets[args[b + 2]], args[b + 3]
    local ok, r = false, nil
    if kind <= 2 and set.fast and vals[key] == nil and (not fast[key] or fast[key][6] == set) then
      ok, r = pcall(serveFast, key, kind, n, set, now) -- nil: a value serveFast leaves to serve
    end
    if not (ok and r) then
      ok, r = pcall(serve, key, kind, n, set, now)
    end
    if not ok then -- the key's value made the rules fail: it is corrupt
      r = answering(kind) and {-1} or nil
    end
    if r and r ~= true then -- true: serveFast answered in out
      for k = 1, #r do
        out[#out + 1] = r[k]
      end
    end
  end

  if #written == 0 then
    return out
  end
  out[1] = 1

  -- keeps reports whether a record, name, that expires at expiry (ms,
  -- Redis's clock), stays: until it expires, and for the store's own, while
  -- its client may send its call again.
  local clock = floor(timeNow() / 1000)
  local function keeps(name, expiry)
    if expiry <= clock then
      return false
    end
    local seq = sub(name, 1, #mine) == mine and tonumber(sub(name, #mine + 1))
    return not (seq and seq < low and not keep[seq])
  end

  -- keepRest appends to parts the entries of rest (a value's records, as
  -- bytes) that stay, and returns how many, and the latest expiry of them.
  local function keepRest(rest, parts)
    local n, pos, kept, latest = #rest, 1, 0, 0
    while pos <= n do
      local len = sunpack('<H', rest, pos)
      local name = sub(rest, pos + 2, pos + 1 + len)
      local k = sunpack('<I4', rest, pos + 2 + len)
      local stop = pos + 6 + len + 8 * k
      local expiry = sunpack('<d', rest, pos + 6 + len)
      if byte(name) ~= 35 or keeps(name, expiry) then
        parts[#parts + 1] = sub(rest, pos, stop - 1)
        kept, latest = kept + 1, max(latest, expiry)
      end
      pos = stop
    end
    return kept, latest
  end

  local function inSet(set, field)
    for _, p in ipairs(set) do
      if p.field == field then
        return true
      end
    end
    return false
  end

  -- Each key written is stored once: its set's states first, in order (so
  -- that serveFast reads the next), those of policies the call does not
  -- name (another instance's) while they last, and the records that may
  -- still be asked for; the first key the call leaves a state in also holds
  -- this call's record (a reset alone needs none: dropping a key again is
  -- harmless).
  local recorded = false
  -- recordOf returns this call's record, as an entry, once: the first key
  -- written holds it, if the call took or gave back units, or decided
  -- anything beside a reset (a request denied before a reset would be
  -- allowed after it). A call of resets alone needs none: dropping a key
  -- again is harmless.
  local recorded = not (taking or decides)
  local function recordOf()
    if recorded then
      return nil
    end
    recorded = true
    -- entry(record, {clock + replay, out...}), without the table: a
    -- call's answers are at most maxAnswers numbers, which Lua moves at
    -- once.
    return spack('<H', #record) .. record .. spack('<I4d', #out + 1, clock + replay) .. spack(dfmtOf(#out), unpack(out))
  end

  -- Each key is kept no sooner than its ResetAfter, and grace after, and
  -- as long as the records it keeps may be asked for.
  for _, key in ipairs(written) do
    local f = fast[key]
    if f then -- serveFast's: its state, then the records that stay, as bytes
      local state, latest = f[6].fast .. spack('<dd', f[1], f[2]), 0
      if f[3] ~= '' then
        local parts = {state}
        local ok, _, last = pcall(keepRest, f[3], parts)
        if ok then
          state, latest = table.concat(parts), last
        end
      end
      local px = max(cdiv(f[5], 1000) + f[4], latest - clock)
      local r = recordOf()
      if r then
        state = state .. r
        px = max(px, replay) -- the record outlives any attempt of its call
      end
      rcall('SET', key, state, 'PX', max(px, 1))
    end
    local v, w = vals[key], wrote[key]
    if v and not f then
      local parts = {MARK}
      local states, records, latest = 0, 0, 0
      local longest = w.longest or 0
      for _, p in ipairs(w.set) do
        local t = v.states[p.field]
        if t then
          parts[#parts + 1] = entry(p.field, t)
          states = states + 1
        end
      end
      for field, t in pairs(v.states) do
        if not inSet(w.set, field) then
          local keepIt = true
          local p = paramsOf(field, t)
          if p then -- another instance's policy: kept while it lasts
            local ok, left = pcall(function() return resetAfter(p, load(p, t, w.now), w.now) end)
            if ok then
              keepIt = left > 0
              longest = max(longest, left)
            end
          end
          if keepIt then
            parts[#parts + 1] = entry(field, t)
            states = states + 1
          end
        end
      end
      for name, r in pairs(v.records) do
        if keeps(name, r[1]) then
          parts[#parts + 1] = r[2]
          records, latest = records + 1, max(latest, r[1])
        end
      end
      if v.rest and v.rest ~= '' then
        local mark = #parts
        local ok, kept, last = pcall(keepRest, v.rest, parts)
        if ok then
          records, latest = records + kept, max(latest, last)
        else -- a tail the script cannot walk: its records go
          for k = #parts, mark + 1, -1 do
            parts[k] = nil
          end
        end
      end
      local r = recordOf()
      if r then
        parts[#parts + 1] = r
        records, latest = records + 1, clock + replay
      end
      local keepFor = latest - clock -- the records' time left, ms
      if states + records == 0 then
        rcall('DEL', key)
      elseif not w.longest and raw[key] then -- a refund's: the TTL stays, or the records' if longer
        if records > 0 then
          rcall('SET', key, table.concat(parts), 'PX', max(rcall('PTTL', key), keepFor, 1))
        else
          rcall('SET', key, table.concat(parts), 'KEEPTTL')
        end
      else
        rcall('SET', key, table.concat(parts), 'PX', max(cdiv(longest, 1000) + w.grace, keepFor, 1))
      end
    end
  end
  return out
end

return decideCall(KEYS, ARGV)
