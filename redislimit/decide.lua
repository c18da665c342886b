-- chanlimit's decisions for a burst of requests: each key decided
-- atomically, under all its policies at once, by the in-memory rules of
-- package algorithms applied to whole microseconds.
--
-- KEYS     one per request: the key's Redis key, a string holding the
--          states of its policies (field "algorithm|name", numbers
--          {limit, window, capacity, the state's numbers...}), the key's
--          own entry (field "@": see META_NUMS) and the
--          records of calls that changed it (field "#store:call", numbers
--          {expiry on Redis's clock in ms, the call's number, its
--          answers...}): a byte
--          0xC2, then for each field its length (2 bytes), its bytes, its
--          count of numbers (4 bytes) and the numbers, little-endian
--          doubles (struct packs and unpacks them in C).
-- ARGV     1: the numbers, little-endian doubles: the grace kept past a
--          key's ResetAfter, in milliseconds, on Redis's clock and on the
--          caller's; how long a record is kept (ms); the lowest call of
--          the store's that its client may still send; 1 if the requests'
--          keys are distinct (no two on one key), else 0; the call's
--          number; the number of calls below that lowest that Redis may
--          yet run, then those; then for
--          each request: kind (ALLOW, PEEK, REFUND, RESET, TURN,
--          GIVE_BACK or DRY_RUN, below), n, its set (1 for ARGV[4], ...), its
--          own time in microseconds (-1: Redis's own clock, TIME), and a
--          generation: for a give back, its grant's; for any other, one
--          drawn for the key, if it makes its states afresh. Each is
--          decided at the later of its own time and the key's last write,
--          and tells each wait from its own time.
--          A dry-run policy decides each allow, peek and granted turn
--          alone, as if it were the key's only policy, taking if it allows
--          (not on a peek); the others decide together. A turn is a
--          waiter's: it takes only if the others grant it with no delay,
--          and only then do the dry-run policies decide it. A give back is a refund to the policies
--          that are not dry-run, if the key's generation is still the
--          grant's and its policies have the params it names; else it
--          gives nothing back. A dry run is decided by the dry-run
--          policies alone, as an allow is: a request callers waiting on
--          its key refused.
--          2: the store's id; 3: the call's number; then the sets of
--          policies, each one string: for each policy, six doubles
--          (algorithm: TOKEN_BUCKET to FIXED_WINDOW, below, negated
--          for a dry-run policy; limit; window (us); capacity;
--          units refilled per microsecond and units in a token, the
--          buckets', 0 for the others), then its field: its length (2
--          bytes) and its bytes. A set's string is all the script knows of
--          it, so the script keeps the set it makes of one by the string.
--
-- Returns a string of numbers, little-endian doubles, as ARGV[1] is
-- (struct packs them in C, and the client reads them at once: a table of
-- numbers would be a reply of as many integers): 1 if the call changed a
-- key, else 0, plus 2 if the fast path
-- (serveFast) raised an error on a key (a fault of the script's, which
-- the client counts); then, request after
-- request, for an allow, a peek, a refund, a turn or a dry run: -1 if
-- the key holds a value
-- the script did not write (the key is corrupt: its requests fail, the
-- others are decided), or the key's generation (the one a grant given
-- back names), then for each policy its own numbers: allowed, remaining,
-- retry after, reset after, delay (us), by how many ns its retry after
-- was rounded up, and, where it allowed a request that the enforced
-- policies denied together, its reset after as it is, since nothing was
-- taken from it (else 0); a dry-run policy that did not decide says
-- allowed. The store combines them as a router does in memory. For a
-- refund, 0; nothing for a reset or a give back.
--
-- A call that changes a key leaves its answers in the first key it
-- writes, which lives as long as the client may send the call
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
-- call. What a call leaves in the state they share (the keys' values it
-- read, its answers, the tables out and takes) the next call sets before
-- it reads it; the caches (of sets of policies, of TTLs) hold what never
-- changes.

-- The request kinds and the algorithms, by the numbers the store sends:
-- Go's (chanlimit.StoreOpKind, and redislimit's scriptAlgorithm), written
-- here by go generate. The script counts on their order, which the test
-- that writes them checks: ALLOW and PEEK first, then REFUND, the others
-- after; the three buckets first (TOKEN_BUCKET, GCRA, LEAKY_BUCKET).
-- BEGIN go generate: do not edit
local ALLOW, PEEK, REFUND, RESET, TURN, GIVE_BACK, DRY_RUN = 1, 2, 3, 4, 5, 6, 7
local TOKEN_BUCKET, GCRA, LEAKY_BUCKET, SLIDING_WINDOW_LOG, SLIDING_WINDOW_COUNTER, FIXED_WINDOW = 1, 2, 3, 4, 5, 6
-- END go generate

-- The library functions, as locals: a local is found at once, a global
-- through two tables. They are bound by the first call (bind), since a
-- library is loaded where none of them exists.
local floor, max, min
local sub, byte, find, match, rep, format
local spack, sunpack
local rcall
local META_HEAD -- the bytes of a key's own entry before its numbers (see META_NUMS), made by bind
local META_ZEROS -- its last three numbers, 0, as bytes: made by bind

local function bind()
  floor, max, min = math.floor, math.max, math.min
  sub, byte, find, match, rep, format = string.sub, string.byte, string.find, string.match, string.rep, string.format
  spack, sunpack = struct.pack, struct.unpack
  rcall = redis.call
  META_HEAD = spack('<Hc0I4', 1, '@', 5)
  META_ZEROS = rep('\0', 24)
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
--
-- It is on the path of every bucket request the script serves: bucketUsed is
-- written out in it, and a division by 1 (perUs is 1 whenever the limit
-- divides the window in microseconds) is not made, since a Lua call costs
-- more than the arithmetic.
local function bucketDecision(p, used, last, now, n)
  local perUs, perToken = p.perUs, p.perToken
  local at, ahead = now, 0 -- bucketUsed
  if now < last then
    at, ahead = last, last - now
  end
  local el = at - last
  if el > 0 and used > 0 then
    if el >= (perUs == 1 and used or cdiv(used, perUs)) then
      used = 0
    else
      used = used - el * perUs
    end
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
  if perToken ~= 1 then
    remaining = idiv(remaining, perToken)
  end
  if perUs ~= 1 then
    reset = cdiv(reset, perUs)
  end
  if reset > 0 then -- extend
    reset = reset + ahead
  end
  return true, remaining, 0, reset, delay, 0, used + need, at
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
  if p.alg <= LEAKY_BUCKET then
    return {used = 0, last = 0, fresh = true}
  elseif p.alg == SLIDING_WINDOW_LOG then
    return {total = 0, entries = {}}
  elseif p.alg == SLIDING_WINDOW_COUNTER then
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
  if p.alg <= LEAKY_BUCKET then
    s = {used = t[4], last = t[5]}
  elseif p.alg == SLIDING_WINDOW_LOG then
    s = {total = t[4], entries = {}}
    for i = 5, #t, 2 do
      s.entries[#s.entries + 1] = {t[i], t[i + 1]}
    end
  elseif p.alg == SLIDING_WINDOW_COUNTER then
    s = {start = t[4], prev = t[5], cur = t[6]}
  else
    s = {start = t[4], count = t[5]}
  end
  if t[1] == p.limit and t[2] == p.window and t[3] == p.cap then
    return s
  end
  local old = {limit = t[1], window = t[2], cap = t[3]}
  if p.alg <= LEAKY_BUCKET then
    return bucketAdopt(p, s, old, now)
  elseif p.alg == SLIDING_WINDOW_LOG then
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
  elseif p.alg == SLIDING_WINDOW_COUNTER then
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
  if p.alg <= LEAKY_BUCKET then
    t[4], t[5] = s.used, s.last
  elseif p.alg == SLIDING_WINDOW_LOG then
    t[4] = s.total
    for _, e in ipairs(s.entries) do
      t[#t + 1] = e[1]
      t[#t + 1] = e[2]
    end
  elseif p.alg == SLIDING_WINDOW_COUNTER then
    t[4], t[5], t[6] = s.start, s.prev, s.cur
  else
    t[4], t[5] = s.start, s.count
  end
  return t
end

local function decide(p, s, now, n, d)
  if p.alg <= LEAKY_BUCKET then
    bucketDecide(p, s, now, n, d)
  elseif p.alg == SLIDING_WINDOW_LOG then
    logDecide(p, s, now, n, d)
  elseif p.alg == SLIDING_WINDOW_COUNTER then
    counterDecide(p, s, now, n, d)
  else
    fixedDecide(p, s, now, n, d)
  end
end

local function resetAfter(p, s, now)
  if p.alg <= LEAKY_BUCKET then
    return bucketResetAfter(p, s, now)
  elseif p.alg == SLIDING_WINDOW_LOG then
    return logResetAfter(p, s, now)
  elseif p.alg == SLIDING_WINDOW_COUNTER then
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
local algOfField, fieldsMet = {}, 0 -- the algorithm of each field met, false for one the script does not know; let go at 1,024
local function algOf(field)
  local alg = algOfField[field]
  if alg == nil then
    alg = algs[match(field, '^([%w_]+)|') or ''] or false
    if fieldsMet >= 1024 then
      algOfField, fieldsMet = {}, 0
    end
    algOfField[field], fieldsMet = alg, fieldsMet + 1
  end
  return alg or nil
end

local function paramsOf(field, t)
  local alg = algOf(field)
  if not alg then
    return nil
  end
  local p = {alg = alg, limit = t[1], window = t[2], cap = t[3], perUs = 0, perToken = 0}
  if alg <= LEAKY_BUCKET then
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
  if #t < 5 and not (alg == SLIDING_WINDOW_LOG and #t == 4 and t[4] == 0) -- an empty log, as an earlier script left one a grant given back emptied
      or (alg and (t[1] < 1 or t[2] < 1)) or (alg == SLIDING_WINDOW_LOG and #t % 2 ~= 0)
      or (alg and alg ~= SLIDING_WINDOW_LOG and #t ~= (alg == SLIDING_WINDOW_COUNTER and 6 or 5)) then
    return false
  end
  return true
end

-- A key's value is a byte 0xC2, then entries: a field (its length, two
-- bytes, then its bytes) and its numbers (their count, four bytes, then
-- each a little-endian double). struct packs and unpacks them in C.
local MARK = '\194' -- 0xC2

-- A key's value holds, after its states, an entry of the key's own,
-- field "@", numbers {the instant the key was last written at (us), its
-- generation, 0, 0, 0}. A request is decided at the later of its own time
-- and that instant, so that a key's time never goes back (a request sent
-- before another was decided may come after it). The generation is a
-- number the write that made the key's states afresh drew (the store
-- sends one with each request), kept while the key holds them: a grant
-- given back names it, and goes back only to the states it was taken
-- from, never across a Reset (which drops the entry) or a change of the
-- key's policies (a write that carries a state over to other params draws
-- another). Its three zeros make five numbers, so that a script of
-- v0.2.0, which keeps the states of policies it does not know, keeps it.
local META_NUMS = 5

local function metaEntry(ts, gen)
  return spack('<c0ddc0', META_HEAD, ts, gen, META_ZEROS)
end

-- packNums returns the n first numbers of t as doubles, and unpackNums the k
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
local function packNums(t, n)
  if n <= CHUNK then
    return spack(dfmtOf(n), unpack(t, 1, n))
  end
  local parts = {}
  for i = 1, n, CHUNK do
    local j = min(i + CHUNK - 1, n)
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
  return spack('<H', #field) .. field .. spack('<I4', #t) .. packNums(t, #t)
end

-- parseNew parses blob, after its mark, or raises an error if it ends
-- short.
local function parseNew(blob)
  local states, records, meta = {}, {}, nil
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
      local expiry = k >= 1 and sunpack('<d', blob, pos)
      if not whole(expiry) then -- an expiry no script writes: no TTL could hold it
        return nil
      end
      pos = pos + 8 * k
      records[field] = {expiry, sub(blob, start, pos - 1)}
    elseif field == '@' then -- the key's own: when it was last written, and its generation
      local t
      t, pos = unpackNums(blob, pos, k)
      if k ~= META_NUMS or not whole(t[1]) or not whole(t[2]) then
        return nil
      end
      meta = {ts = t[1], gen = t[2]}
    else
      local t
      t, pos = unpackNums(blob, pos, k)
      if not valid(field, t) then
        return nil
      end
      states[field] = t
    end
  end
  return {states = states, records = records, meta = meta}
end

-- parse returns the fields of a key's value, blob: states by field, and
-- records by name ({expiry, bytes}); or nil if blob is not what the
-- script writes (another client's value: the key is corrupt).
local function parse(blob)
  if sub(blob, 1, 1) ~= MARK then
    return nil
  end
  local ok, v = pcall(parseNew, blob)
  if ok then
    return v
  end
  return nil
end

-- setCache holds the sets of policies of earlier calls, by the string
-- that describes each (ARGV): a set a store sends again is made once, and
-- found by one lookup (Redis makes each argument a Lua string, the same
-- object as an equal one that lives, as the cache's keys do). It is let
-- go once it holds maxSets, as sets let go by their routers (SetPolicies,
-- SetOverride) are not kept for ever.
local setCache, setsCached, maxSets = {}, 0, 1024

-- setOf returns the set of policies that desc describes.
local function setOf(desc)
  local set = setCache[desc]
  if set then
    return set
  end
  set = {}
  local pos, n = 1, #desc
  while pos <= n do
    local alg, limit, window, cap, perUs, perToken, len = sunpack('<ddddddH', desc, pos)
    local field = sub(desc, pos + 50, pos + 49 + len)
    if #field ~= len then
      error('redislimit: a set of policies cut short')
    end
    set[#set + 1] = {
      alg = math.abs(alg), dry = alg < 0, field = field, limit = limit, window = window,
      cap = cap, perUs = perUs, perToken = perToken,
    }
    pos = pos + 50 + len
  end
  local p = set[1]
  if #set == 1 and not p.dry and (p.alg <= LEAKY_BUCKET or p.alg == FIXED_WINDOW) then
    -- The common case, served without decoding (serveFast): the bytes its
    -- state starts with, in a value the script wrote.
    set.fast = MARK .. spack('<H', #p.field) .. p.field .. spack('<I4ddd', 5, p.limit, p.window, p.cap)
  end
  if setsCached >= maxSets then
    setCache, setsCached = {}, 0
  end
  setCache[desc], setsCached = set, setsCached + 1
  return set
end

-- answering reports whether a request of kind is answered: an allow, a
-- peek, a refund, a turn or a dry run.
local function answering(kind)
  return kind <= REFUND or kind == TURN or kind == DRY_RUN
end

-- The state of the call being decided. decideCall sets it at its start,
-- and the functions below read it: they are made once (in a Function's
-- library) rather than at every call, as closures would be.
local ownGrace, clockGrace, replay, low -- the grace past ResetAfter on Redis's clock and the caller's (ms); how long a record is kept (ms); the store's lowest call out
local keep -- this store's calls below low that may yet run again: their records stay
local noCalls = {} -- keep, when there are none: never written
local got -- the keys' values as read, request by request (false: none)
local raw -- the same by key, made before requests are served one by one
local mine, record, seq -- the prefix of this store's records, and this call's record and number
local mineOf -- the store's id that mine was made for: a cache of what never changes
local mineLast, mineEnds -- the last byte of the store's id in mine, and the mine it is of
local redisNow -- Redis's clock, in microseconds: read once, if needed
-- The keys' values, parsed as the requests need them and kept as they
-- change them: false for a corrupt one. The keys written, in order, with
-- for each its set, the time of its latest request, its grace, and the
-- longest ResetAfter of its writes (nil: a refund's, which keeps the
-- key's TTL).
local vals, written, wrote
local fast -- serveFast's writes, by key: the state's two numbers, the records after that stay, grace, ResetAfter, set, the latest expiry of those records
-- The answers, out[1] to out[nout]; first: 1 if the call wrote, so that
-- its answers are kept, plus 2 if serveFast failed on a key (fastFailed).
-- out is kept from call to call, as takes is (decideEveryFast): a table
-- that grows is made again each time it does, which costs a call of ten
-- requests more than deciding one of them. Only the length a call sets is
-- read.
local out, nout = {}, 0
local takes = {}
local packed -- out, packed as the call answers it, once it is whole: the call's record holds it too
local fastFailed -- serveFast raised an error on a key of the call, which serve then served: a fault of serveFast's, told to the client
local clock -- Redis's clock in ms, read once the requests are decided
local recorded -- the call's record is written (in the first key the call writes)

local function timeNow()
  if not redisNow then
    local t = rcall('TIME')
    redisNow = t[1] * 1000000 + t[2] -- the strings made numbers by the arithmetic: a C call less each than tonumber
  end
  return redisNow
end

-- requestTime returns the time of a request whose time is now (us;
-- below 0: on Redis's own clock, TIME), and how long past its ResetAfter
-- its key is kept (ms): ownGrace on Redis's clock, clockGrace on the
-- caller's.
local function requestTime(now)
  if now < 0 then
    return timeNow(), ownGrace
  end
  return now, clockGrace
end

local function value(key)
  local v = vals[key]
  local f = fast[key]
  if v == nil and f then -- serveFast's write, as serve keeps it
    local p = f[6][1]
    v = {states = {[p.field] = {p.limit, p.window, p.cap, f[1], f[2]}}, records = {}, rest = f[3], meta = {ts = f[8], gen = f[9]}}
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

-- clockMs returns Redis's clock in milliseconds, read once a call.
local function clockMs()
  if not clock then
    local ms = timeNow() / 1000
    clock = ms - ms % 1 -- floor, for a number >= 0, without a C call
  end
  return clock
end

-- ownRecordGoes reports whether the record whose name starts at pos in
-- blob, is len bytes long and holds k numbers is one of this store's that
-- no attempt of its call can ask for any more: below low, and not kept.
-- Its call's number is its second number (its name has it too, but
-- reading a number from a string costs Redis's Lua a strtod).
local function ownRecordGoes(blob, pos, len, k)
  if k < 2 or len <= #mine then
    return false
  end
  if mineEnds ~= mine then
    mineLast, mineEnds = byte(mine, #mine - 1), mine
  end
  -- Found in place, with no substring made (each costs Redis a string's
  -- hashing); another store's name is told apart by the last byte of its
  -- id first, so that the search scans the rest of blob for about 1 in 16
  -- of them.
  if byte(blob, pos + #mine - 2) ~= mineLast or find(blob, mine, pos, true) ~= pos then
    return false
  end
  local n = sunpack('<d', blob, pos + len + 12)
  return n < low and not keep[n]
end

-- keptRecords returns, of blob's bytes from start on (a value's bytes
-- after its states), the records that stay (as keeps says), as bytes, the
-- latest expiry of them and how many they are; or nil if those bytes are
-- not whole records and nothing else. It walks blob in place: no bytes
-- are copied unless a record stays.
local function keptRecords(blob, start)
  local n, pos, latest, count, now = #blob, start, 0, 0, clockMs()
  local parts, from, cut -- the records kept before one that went; where the run being kept starts; whether one went
  from = start
  while pos <= n do
    if pos + 2 > n then
      return nil
    end
    local len, first = sunpack('<HB', blob, pos) -- the name's length and first byte, at once
    if first ~= 35 or pos + 13 + len > n then -- a name, its count and one number at least: the expiry
      return nil
    end
    local k, expiry = sunpack('<I4d', blob, pos + 2 + len)
    local stop = pos + 6 + len + 8 * k
    if k < 1 or stop - 1 > n or not (expiry >= 0 and expiry < 9007199254740992 and expiry % 1 == 0) then -- not whole: an expiry no script writes, which no TTL could hold
      return nil
    end
    if expiry <= now or ownRecordGoes(blob, pos + 2, len, k) then
      if from < pos then -- what stays before it: kept (a table only then)
        parts = parts or {}
        parts[#parts + 1] = sub(blob, from, pos - 1)
      end
      from, cut = stop, true
    else
      count = count + 1
      if expiry > latest then
        latest = expiry
      end
    end
    pos = stop
  end
  if not cut then -- every one stays
    return count > 0 and sub(blob, start) or '', latest, count
  end
  if not parts then -- those that went were first: what follows them stays
    return from <= n and sub(blob, from) or '', latest, count
  end
  if from <= n then
    parts[#parts + 1] = sub(blob, from)
  end
  return table.concat(parts), latest, count
end

-- fastState reads blob, a key's value (false: none), for serveFast and
-- decideEveryFast: if it is a value the script wrote holding, first, a
-- state under the set whose bytes start head (set.fast), then the key's
-- own entry (or none, in a value an earlier script wrote), then records
-- or nothing, it returns true, the state's two numbers (a bucket's used
-- and last, a window's start and count; nil for a key that holds
-- nothing), the records after it that stay, as bytes, when the last of
-- them expires, and the key's last write and generation (nil: none). For
-- any other value it returns false: serve's.
local function fastState(blob, head)
  if not blob then
    return true, nil, nil, '', 0
  end
  if #blob < #head + 16 or find(blob, head, 1, true) ~= 1 then
    return false
  end
  local x, y = sunpack('<dd', blob, #head + 1)
  if not (x >= 0 and x % 1 == 0 and y >= 0 and y % 1 == 0 and x < 9007199254740992 and y < 9007199254740992) then
    return false
  end
  local pos, ts, gen = #head + 17, nil, nil
  if find(blob, META_HEAD, pos, true) == pos then
    if #blob < pos + #META_HEAD + 8 * META_NUMS - 1 then
      return false
    end
    ts, gen = sunpack('<dd', blob, pos + #META_HEAD)
    if not (ts >= 0 and ts % 1 == 0 and gen >= 0 and gen % 1 == 0 and ts < 9007199254740992 and gen < 9007199254740992) then -- whole, written out
      return false
    end
    pos = pos + #META_HEAD + 8 * META_NUMS
  end
  if pos > #blob then
    return true, x, y, '', 0, ts, gen
  end
  local rest, latest = keptRecords(blob, pos)
  if not rest then -- another entry than a record follows, or a broken one
    return false
  end
  return true, x, y, rest, latest, ts, gen
end

-- fastDecide decides n units at now under p, a bucket or a fixed window
-- whose state's numbers are x and y (nil: untouched): allowed, remaining,
-- retry after, reset after, delay, the retry's rounding in ns, and if
-- allowed the state's numbers after. decideEveryFast writes it out, and
-- requestTime, since a call costs more than either: change them together.
local function fastDecide(p, x, y, now, n)
  if p.alg <= LEAKY_BUCKET then
    return bucketDecision(p, x or 0, y or now, now, n) -- a fresh bucket is full, whenever it was made
  end
  local allowed, remaining, retry, reset, x2, y2 = fixedDecision(p, x or 0, y or 0, now, n)
  return allowed, remaining, retry, reset, 0, 0, x2, y2
end

-- serveFast serves an allow or a peek on key under set, a single bucket
-- or fixed window, whose value holds its state alone, first, then the
-- key's own entry, then records or nothing (fastState), or which
-- serveFast wrote earlier in this call: as serve would, reading the two
-- numbers of its state in place. It returns nil for any other value, for
-- serve.
local function serveFast(key, kind, n, set, now, gen)
  local x, y, rest, latest, ts, kgen -- the state's numbers; the records after it that stay, and when the last of them expires; the key's last write and generation
  local f = fast[key]
  if f then -- written earlier in this call
    x, y, rest, latest, ts, kgen = f[1], f[2], f[3], f[7], f[8], f[9]
  else
    local ok
    ok, x, y, rest, latest, ts, kgen = fastState(raw[key], set.fast)
    if not ok then
      return nil
    end
  end
  local grace, at
  now, grace = requestTime(now)
  at = now
  if ts and ts > at then
    at = ts
  end
  local ahead = at - now
  local allowed, remaining, retry, reset, delay, rounded
  allowed, remaining, retry, reset, delay, rounded, x, y = fastDecide(set[1], x, y, at, n)
  if not kgen or x == nil then -- a key without states: a write makes them afresh
    kgen = gen
  end
  if allowed and kind == ALLOW then
    if not fast[key] then
      written[#written + 1] = key
    end
    fast[key] = {x, y, rest, grace, reset, set, latest, at, kgen}
  end
  local a = allowed and 1 or 0
  local o = nout
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7], out[o + 8] =
    kgen, a, remaining, extend(retry, ahead), extend(reset, ahead), extend(delay, ahead), rounded, 0
  nout = o + 8
  return true -- answered, in out
end

-- serve serves one request on key, and returns its answer:
-- nil for a refund or a reset; {-1} if the key holds a value the script
-- did not write; otherwise the key's generation, then each policy's
-- numbers (seven: the file's head says which). gen is the
-- request's: for a give back, the generation of the grant it gives back;
-- for any other, a number drawn for the key, if it makes its states
-- afresh.
local function serve(key, kind, n, set, now, gen)
  local v = value(key)
  if kind == RESET then
    -- The states go, a corrupt value too, and the key's own entry; the
    -- records stay: they are about calls, not the key.
    vals[key] = {states = {}, records = v and v.records or {}, rest = v and v.rest}
    note(key, set, 0, 0, 0)
    return nil
  end
  if not v then
    return answering(kind) and {-1} or nil -- a refund finds nothing of its own to give back
  end
  local grace, at
  now, grace = requestTime(now)
  at = now -- the instant it is decided at: its own time, or the key's last write if later
  if v.meta and v.meta.ts > at then
    at = v.meta.ts
  end
  local ahead = at - now
  local ss = {}
  local changed = false -- a policy's state was kept under other params: the key's policies changed
  for j, p in ipairs(set) do
    local t = v.states[p.field]
    changed = changed or (t ~= nil and not (t[1] == p.limit and t[2] == p.window and t[3] == p.cap))
    local s = load(p, t, at)
    if s.fresh then
      s.last = at -- a fresh bucket is full, whenever it was made
    end
    ss[j] = s
  end

  if kind == GIVE_BACK and gen ~= 0 and (changed or not v.meta or v.meta.gen ~= gen) then
    return nil -- a grant given back to states it was not taken from: the key was Reset, or its policies changed, since
  end
  if kind == REFUND or kind == GIVE_BACK then -- refund: a policy without a state is left without one; a grant given back leaves the dry-run ones
    local gave = false
    for j, p in ipairs(set) do
      if v.states[p.field] and not (kind == GIVE_BACK and p.dry) then
        local s = ss[j]
        if p.alg <= LEAKY_BUCKET then
          bucketRefund(p, s, n)
        elseif p.alg == SLIDING_WINDOW_LOG then
          logRefund(p, s, at, n)
        elseif p.alg == SLIDING_WINDOW_COUNTER then -- the current window's units, once rolled on to at
          local w = roll(p, s, at)
          if w.cur > 0 then
            s.start, s.prev, s.cur = w.start, w.prev, w.cur - min(n, w.cur)
          end
        elseif fixedResetAfter(p, s, at) > 0 then -- a window open at at
          s.count = s.count - min(n, s.count)
        end
        if resetAfter(p, s, at) > 0 then
          v.states[p.field] = pack(p, s)
        else
          v.states[p.field] = nil -- untouched again: no state, as for a key never seen
        end
        gave = true
      end
    end
    if gave then
      note(key, set, at, grace, nil)
      v.meta = {ts = at, gen = (v.meta and not changed) and v.meta.gen or gen}
    end
    if kind == REFUND then
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
    elseif kind == DRY_RUN then -- a request a line refused: for the dry-run policies alone
      ds[j] = {allowed = true, remaining = 0, retry = 0, reset = 0, delay = 0}
    else
      local d = {}
      decide(p, ss[j], at, n, d)
      ds[j] = d
      allowed, delay = allowed and d.allowed, max(delay, d.delay)
    end
  end
  local dryDecides = kind ~= TURN or (allowed and delay == 0)
  for j, p in ipairs(set) do
    if p.dry then
      if not dryDecides then
        ds[j] = {allowed = true, remaining = 0, retry = 0, reset = 0, delay = 0} -- not asked
      elseif n > p.cap then
        ds[j] = {allowed = false, remaining = 0, retry = 0, reset = 0, delay = 0} -- it would deny, and takes nothing
      else
        local d = {}
        decide(p, ss[j], at, n, d)
        d.take = d.allowed and kind ~= PEEK
        ds[j] = d
      end
    end
  end
  -- Last: a key the rules fail on is left as it was.
  local took, longest = false, 0
  for j, p in ipairs(set) do
    local d = ds[j]
    if not allowed and d.allowed and not p.dry then
      d.asIs = resetAfter(p, ss[j], at) -- nothing was taken from it: the store reports its state as it is
    end
    if (p.dry and d.take) or (not p.dry and allowed and (kind == ALLOW or (kind == TURN and delay == 0))) then
      took, longest = true, max(longest, d.reset)
    end
  end
  if took then
    for j, p in ipairs(set) do
      local d = ds[j]
      if (p.dry and d.take) or (not p.dry and allowed and (kind == ALLOW or (kind == TURN and delay == 0))) then
        v.states[p.field] = pack(p, d.commit)
      end
    end
    note(key, set, at, grace, longest)
    v.meta = {ts = at, gen = (v.meta and not changed) and v.meta.gen or gen}
  end
  local r = {v.meta and v.meta.gen or gen}
  for j = 1, #set do -- each wait told from the request's own time
    local d = ds[j]
    r[#r + 1] = d.allowed and 1 or 0
    r[#r + 1] = d.remaining
    r[#r + 1] = extend(d.retry, ahead)
    r[#r + 1] = extend(d.reset, ahead)
    r[#r + 1] = extend(d.delay, ahead)
    r[#r + 1] = d.sub or 0
    r[#r + 1] = d.asIs and extend(d.asIs, ahead) or 0
  end
  return r
end

-- keeps reports whether a record named name, that expires at expiry
-- (ms, Redis's clock), stays: until it expires, and for the store's own,
-- while an attempt of its call may come.
local function keeps(name, r)
  return r[1] > clock and not ownRecordGoes(r[2], 3, #name, sunpack('<I4', r[2], 3 + #name))
end

local function inSet(set, field)
  for _, p in ipairs(set) do
    if p.field == field then
      return true
    end
  end
  return false
end

-- recordOf returns the bytes of the call's record up to its answers,
-- which follow them as the call returns them (packed), or nil if the
-- record is written already or needs none: entry(record, {clock +
-- replay, seq, out...}), without the table, and in two strings, so that
-- the value that holds them is made at once, by one concatenation.
local function recordOf()
  if recorded then
    return nil
  end
  recorded = true
  return spack('<Hc0I4dd', #record, record, nout + 2, clock + replay, seq)
end

-- A key's value is written by PSETEX key ms value, which is SET key value
-- PX ms with two arguments fewer to make and no option to parse (some
-- 500 instructions less a write, bench/redis-ir).
--
-- ttl returns px, a whole number of milliseconds, as PSETEX's argument: as
-- an integer, which costs a fraction of what a number's own string
-- (%.17g) does, and made once for each px met (TTLs repeat: a policy's
-- ResetAfter is within its window, and the grace is the same), since
-- making a string costs more than finding it. The cache is let go at
-- 1,024.
local ttls, ttlsMade = {}, 0
local function ttl(px)
  if px < 1 then
    px = 1
  end
  local s = ttls[px]
  if not s then
    s = format('%d', px)
    if ttlsMade >= 1024 then
      ttls, ttlsMade = {}, 0
    end
    ttls[px], ttlsMade = s, ttlsMade + 1
  end
  return s
end

-- fastValue returns the value that holds, under set, the state whose
-- numbers are x and y, then the key's own entry (its last write ts and
-- generation gen), then rest, records that stay, the last of them
-- expiring at latest (ms, Redis's clock), and the call's record if this
-- value is the one to hold it (recordOf); and how long to keep it (ms):
-- ResetAfter, reset (us), rounded up, and grace after, and as long as the
-- records it holds may be asked for.
local function fastValue(set, x, y, rest, latest, grace, reset, ts, gen)
  local ms = reset / 1000
  ms = ms - ms % 1 -- floor, rounded up below: exact, as reset < 2^53
  if ms * 1000 < reset then
    ms = ms + 1
  end
  local px = ms + grace
  if latest - clock > px then
    px = latest - clock
  end
  if not recorded then -- the call's record, as recordOf makes it
    recorded = true
    if px < replay then -- the record outlives any attempt of its call
      px = replay
    end
    -- Made by one pack ('c0': a string whole), with no piece of it a
    -- string of its own, which Redis's Lua would hash.
    return spack('<c0ddc0ddc0c0Hc0I4ddc0', set.fast, x, y, META_HEAD, ts, gen, META_ZEROS, rest, #record, record, nout + 2, clock + replay, seq, packed), px
  end
  return spack('<c0ddc0ddc0c0', set.fast, x, y, META_HEAD, ts, gen, META_ZEROS, rest), px
end

-- The common case, a call of allows and peeks under sets serveFast
-- serves, each on a key of its own (as the client says, which knows the
-- keys it sends: the script would find out only by a table of them) that
-- holds a value serveFast reads (or none), is served at once, with none of the bookkeeping a call of other
-- requests needs: decideEveryFast decides every request as serveFast
-- would, writing nothing, and storeEveryFast stores each key taken from
-- as the write back would. The requests are KEYS, from args[a] on, four
-- numbers each, under sets.

-- decideEveryFast decides the call into out, and returns what
-- storeEveryFast stores: for each request that takes, eight numbers (its
-- index, its state's two, the latest expiry of the records that stay
-- after it, its grace, its ResetAfter, the instant it was decided at, the
-- key's generation), their count, and those records by the request's
-- index, where there are any. It returns nil for any other call, for
-- decideCall to serve request by request, having changed nothing but out
-- and takes, which it sets again.
local function decideEveryFast(KEYS, args, a, sets)
  local ALLOW, PEEK, LEAKY_BUCKET = ALLOW, PEEK, LEAKY_BUCKET -- registers for the loop, not upvalues
  local nt, rests = 0, nil
  local o = 1 -- out's length
  for i = 1, #KEYS do
    local b = a + (i - 1) * 5
    local kind, n, set, now, gen = args[b], args[b + 1], sets[args[b + 2]], args[b + 3], args[b + 4]
    if kind > PEEK or not set.fast then
      return nil
    end
    local ok, x, y, rest, latest, ts, kgen = fastState(got[i], set.fast)
    if not ok then
      return nil
    end
    if rest ~= '' then
      rests = rests or {}
      rests[i] = rest
    end
    local grace = clockGrace
    if now < 0 then -- requestTime
      now, grace = redisNow or timeNow(), ownGrace
    end
    local at = now -- the instant it is decided at: its own time, or the key's last write if later
    if ts and ts > at then
      at = ts
    end
    if not kgen or x == nil then
      kgen = gen
    end
    local p = set[1]
    local allowed, remaining, retry, reset, delay, rounded
    if p.alg <= LEAKY_BUCKET then -- fastDecide
      allowed, remaining, retry, reset, delay, rounded, x, y = bucketDecision(p, x or 0, y or at, at, n)
    else
      allowed, remaining, retry, reset, x, y = fixedDecision(p, x or 0, y or 0, at, n)
      delay, rounded = 0, 0
    end
    local v, ahead = allowed and 1 or 0, at - now
    if ahead == 0 then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7], out[o + 8] = kgen, v, remaining, retry, reset, delay, rounded, 0
    else -- each wait told from the request's own time
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7], out[o + 8] =
        kgen, v, remaining, extend(retry, ahead), extend(reset, ahead), extend(delay, ahead), rounded, 0
    end
    o = o + 8
    if allowed and kind == ALLOW then
      takes[nt + 1], takes[nt + 2], takes[nt + 3], takes[nt + 4], takes[nt + 5], takes[nt + 6], takes[nt + 7], takes[nt + 8] = i, x, y, latest, grace, reset, at, kgen
      nt = nt + 8
    end
  end
  nout = o
  return takes, nt, rests
end

-- storeEveryFast stores what decideEveryFast decided, the first key
-- taken from with the call's record, and returns the call's answers.
local function storeEveryFast(KEYS, args, a, sets, takes, nt, rests)
  if nt == 0 then
    return packNums(out, nout)
  end
  out[1] = 1
  packed = packNums(out, nout)
  clockMs()
  recorded = false
  for k = 1, nt, 8 do
    local i = takes[k]
    local value, px = fastValue(sets[args[a + (i - 1) * 5 + 2]], takes[k + 1], takes[k + 2], rests and rests[i] or '', takes[k + 3], takes[k + 4], takes[k + 5], takes[k + 6], takes[k + 7])
    rcall('PSETEX', KEYS[i], ttl(px), value)
  end
  return packed
end

-- decideCall decides one call: KEYS and ARGV as above.
local function decideCall(KEYS, ARGV)
  if not rcall then
    bind()
  end

  -- The arguments: the numbers, packed as doubles in ARGV[1]; the store's
  -- id, the call's number and the sets of policies, strings.
  local args = unpackNums(ARGV[1], 1, #ARGV[1] / 8)
  ownGrace, clockGrace, replay, low = args[1], args[2], args[3], args[4]
  local distinct = args[5] == 1 -- no two requests of the call are on one key
  seq = args[6]
  local me, call = ARGV[2], ARGV[3]
  local nkeep = args[7]
  keep = nkeep > 0 and {} or noCalls -- this store's calls below low that may yet run again: their records stay
  for i = 1, nkeep do
    keep[args[7 + i]] = true
  end
  local a = 8 + nkeep

  -- The keys' values, read at once.
  got, raw = rcall('MGET', unpack(KEYS)), nil

  -- A call the client sent again (go-redis retries a pipeline after a read
  -- timeout) finds its record in a key it wrote: its answers are the first
  -- time's, and nothing is decided twice.
  if me ~= mineOf then -- the same store, call after call: made once
    mine, mineOf = '#' .. me .. ':', me
  end
  record = mine .. call
  for i = 1, #KEYS do
    local blob = got[i]
    if blob and #blob >= #record and find(blob, record, 1, true) then
      local v = parse(blob)
      local r = v and v.records[record]
      if r then
        local bytes = r[2]
        local len = sunpack('<H', bytes, 1)
        return sub(bytes, 3 + len + 4 + 16) -- the answers, as doubles: past the name, the count, the expiry and the call's number
      end
    end
  end

  -- The sets of policies.
  local sets = {}
  for i = 4, #ARGV do
    sets[i - 3] = setOf(ARGV[i])
  end

  redisNow, clock, packed = nil, nil, nil
  fastFailed = false

  if distinct then
    out[1], nout = 0, 1
    local ok, takes, nt, rests = pcall(decideEveryFast, KEYS, args, a, sets)
    if ok and takes then
      return storeEveryFast(KEYS, args, a, sets, takes, nt, rests) -- not under pcall: once it has written, nothing is decided again
    end
    fastFailed = not ok -- a fault of the fast path's, as serveFast's
  end

  -- The keys' values as read, by key, for the requests served one by one
  -- (two may be on one key).
  raw = {}
  for i = 1, #KEYS do
    raw[KEYS[i]] = got[i]
  end

  -- The keys' values, parsed as the requests need them and kept as they
  -- change them: false for a corrupt one. The keys written, in order, with
  -- for each its set, the time of its latest request, its grace, and the
  -- longest ResetAfter of its writes (nil: a refund's, which keeps the
  -- key's TTL).
  vals = {}
  written, wrote = {}, {}
  fast = {}
  out[1], nout = 0, 1

  for i = 1, #KEYS do
    local b = a + (i - 1) * 5
    local kind = args[b]
    local key, n, set, now, gen = KEYS[i], args[b + 1], sets[args[b + 2]], args[b + 3], args[b + 4]
    local ok, r = false, nil
    if kind <= PEEK and set.fast and vals[key] == nil and (not fast[key] or fast[key][6] == set) then
      ok, r = pcall(serveFast, key, kind, n, set, now, gen) -- nil: a value serveFast leaves to serve
      fastFailed = fastFailed or not ok
    end
    if not (ok and r) then
      ok, r = pcall(serve, key, kind, n, set, now, gen)
    end
    if not ok then -- the key's value made the rules fail: it is corrupt
      r = answering(kind) and {-1} or nil
    end
    if r and r ~= true then -- true: serveFast answered in out
      for k = 1, #r do
        nout = nout + 1
        out[nout] = r[k]
      end
    end
  end

  if fastFailed then
    out[1] = 2 -- before the record is made: a replay tells it too
  end
  if #written == 0 then
    return packNums(out, nout)
  end
  out[1] = out[1] + 1
  packed = packNums(out, nout)

  -- Redis's clock, read once for the records' expiries (keptRecords).
  clockMs()

  -- Each key written is stored once: its set's states first, in order (so
  -- that serveFast reads the next), those of policies the call does not
  -- name (another instance's) while they last, and the records that may
  -- still be asked for. The first key written also holds this call's
  -- record (recordOf), whatever the call did, a reset alone included: a
  -- reset run again would drop what other calls took since the first.
  recorded = false

  -- Each key is kept no sooner than its ResetAfter, and grace after, and
  -- as long as the records it keeps may be asked for.
  for _, key in ipairs(written) do
    local f = fast[key]
    if f then -- serveFast's: its state, then the records that stay, as bytes
      local value, px = fastValue(f[6], f[1], f[2], f[3], f[7], f[4], f[5], f[8], f[9])
      rcall('PSETEX', key, ttl(px), value)
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
      if v.meta then -- after the states, as fastState reads it
        parts[#parts + 1] = metaEntry(v.meta.ts, v.meta.gen)
      end
      for name, r in pairs(v.records) do
        if keeps(name, r) then
          parts[#parts + 1] = r[2]
          records, latest = records + 1, max(latest, r[1])
        end
      end
      if v.rest and v.rest ~= '' then
        local kept, last, count = keptRecords(v.rest, 1)
        if kept and count > 0 then -- nil: a tail the script cannot walk, whose records go
          parts[#parts + 1] = kept
          records, latest = records + count, max(latest, last)
        end
      end
      local r = recordOf()
      if r then
        parts[#parts + 1], parts[#parts + 2] = r, packed
        records, latest = records + 1, clock + replay
      end
      local keepFor = latest - clock -- the records' time left, ms
      if states + records == 0 and not v.meta then -- a Reset's: the key is as if never seen
        rcall('DEL', key)
      elseif not w.longest and raw[key] then -- a refund's: the TTL stays, or the records' if longer
        if records > 0 then
          rcall('PSETEX', key, max(rcall('PTTL', key), keepFor, 1), table.concat(parts))
        else
          rcall('SET', key, table.concat(parts), 'KEEPTTL')
        end
      else
        rcall('PSETEX', key, max(cdiv(longest, 1000) + w.grace, keepFor, 1), table.concat(parts))
      end
    end
  end
  return packed
end

return decideCall(KEYS, ARGV)
