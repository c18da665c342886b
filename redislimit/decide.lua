-- chanlimit's decisions for a burst of requests: each key decided
-- atomically, under all its policies at once, by the in-memory rules of
-- package algorithms applied to whole microseconds.
--
-- KEYS     one per request: the key's Redis key, a string holding, packed
--          with cmsgpack as {field, value, field, value, ...}, the states
--          of its policies (field "algorithm|name", value {limit, window,
--          capacity, the state's numbers...}) and the records of calls
--          that changed it (field "#store:call", value {expiry on Redis's
--          clock in ms, the call's answers...})
-- ARGV     the grace kept past a key's ResetAfter, in milliseconds, on
--          Redis's clock and on the caller's; how long a record is kept
--          (ms); the store's id; the call's number; the lowest call of the
--          store's that its client may still send, and the number of
--          calls below it that Redis may yet run, then those; the number
--          of sets of policies, then each set: its number of policies,
--          then for each: algorithm (1 token_bucket, 2 gcra,
--          3 leaky_bucket, 4 sliding_window_log, 5 sliding_window_counter,
--          6 fixed_window), field, limit, window (us), capacity, units
--          refilled per microsecond, units in a token (the buckets'; 0 for
--          the others); then for each request: kind (1 allow, 2 peek,
--          3 refund, 4 reset), n, its set, now in microseconds (-1:
--          Redis's own clock, TIME)
--
-- Returns 1 if the call changed a key, else 0; then, request after
-- request, for an allow or a peek: -1 if the key holds a value the script
-- did not write (the key is corrupt: its requests fail, the others are
-- decided), or allowed, then for each policy: allowed, remaining, retry
-- after, reset after, delay (us), and by how many ns its retry after was
-- rounded up; nothing for a refund or a reset.
--
-- A call that changes a key leaves its answers in the first key it
-- changes: a call the client sends again (go-redis retries a pipeline
-- after a read timeout, and a stalled Redis runs every attempt once it
-- wakes) finds them and answers as the first time, deciding nothing
-- twice. A record lasts while the key does, at most its expiry, and the
-- store's own are let go once its client cannot send their call again.
-- A key's value keeps the states of policies the call does not name
-- (another instance's, during a rolling deploy) while they last.
--
-- Lua numbers are doubles: every value here is an integer below 2^53
-- (redislimit's Check bounds the policies so), and every division goes
-- through idiv, which is exact.

-- floor(a / b) for integers 0 <= a < 2^53, 0 < b.
local function idiv(a, b)
  local q = math.floor(a / b)
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

local function bucketUsed(p, s, now)
  local used, last = s.used, s.last
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

local function bucketDecide(p, s, now, n, d)
  local used, at, ahead = bucketUsed(p, s, now)
  local full = p.cap * p.perToken
  local free = full - used
  local need = n * p.perToken
  if free < need then
    d.allowed = false
    d.remaining = idiv(free, p.perToken)
    local deficit = used + need - full
    d.retry = cdiv(deficit, p.perUs)
    local r = deficit - idiv(deficit, p.perUs) * p.perUs
    d.sub = r > 0 and 1000 - ceilMilli(r, p.perUs) or 0
    d.reset = cdiv(used, p.perUs)
    d.delay = 0
  else
    d.allowed = true
    d.remaining = idiv(free - need, p.perToken)
    d.retry = 0
    d.reset = cdiv(used + need, p.perUs)
    d.delay = 0
    if p.alg == 3 then
      d.delay = cdiv(used, p.perUs) -- leaky_bucket: its turn, once the units queued ahead have drained
    end
    d.commit = {used = used + need, last = at}
  end
  d.retry, d.reset, d.delay = extend(d.retry, ahead), extend(d.reset, ahead), d.delay + (d.allowed and p.alg == 3 and ahead or 0)
end

local function bucketResetAfter(p, s, now)
  local used, _, ahead = bucketUsed(p, s, now)
  return extend(cdiv(used, p.perUs), ahead)
end

local function bucketRefund(p, s, n)
  s.used = math.max(s.used - n * p.perToken, 0)
end

-- bucketAdopt carries a state saved under other params (old: limit,
-- window, cap) over to p's, as algorithms' bucket adopt does: whole free
-- tokens kept, capped at the capacity, and the part of a token.
local function bucketAdopt(p, s, old, now)
  local a, b = old.limit, old.window
  while b ~= 0 do a, b = b, a % b end
  local perUs, perToken = old.limit / a, old.window / a
  local used = bucketUsed({perUs = perUs}, s, now)
  local at = math.max(now, s.last)
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

local function fixedDecide(p, s, now, n, d)
  local at, ahead = fixedAt(s, now)
  local start, c = at, 0
  if s.count > 0 and at - s.start < p.window then
    start, c = s.start, s.count
  end
  local left = p.window - (at - start)
  d.delay = 0
  if n > p.limit - c then
    d.allowed, d.remaining, d.retry, d.reset = false, p.limit - c, left, left
  else
    d.allowed, d.remaining, d.retry, d.reset = true, p.limit - c - n, 0, left
    d.commit = {start = start, count = c + n}
  end
  d.retry, d.reset = extend(d.retry, ahead), extend(d.reset, ahead)
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
    d.remaining = math.max(fits, 0)
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

local function logRefund(s, n)
  local k = #s.entries
  if k == 0 then
    return
  end
  local last = s.entries[k]
  n = math.min(n, last[2])
  last[2] = last[2] - n
  s.total = s.total - n
  if last[2] == 0 then
    s.entries[k] = nil
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
    local first, expired = logExpired(math.min(old.window, p.window), s, at)
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
    return {total = math.min(total, p.limit), entries = entries}
  elseif p.alg == 5 then
    local w = roll({window = old.window}, s, now)
    s = {start = w.start, prev = math.min(w.prev, p.limit), cur = math.min(w.cur, p.limit)}
    w = roll(p, s, now)
    if w.prev == 0 and w.cur == 0 then
      return fresh(p)
    end
    return {start = w.start, prev = w.prev, cur = w.cur}
  end
  if fixedResetAfter(old, s, now) == 0 then
    return fresh(p)
  end
  s.count = math.min(s.count, p.limit)
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
local function paramsOf(field, t)
  local alg = algs[string.match(field, '^([%w_]+)|') or '']
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

-- whole reports whether v is an integer the script computes with.
local function whole(v)
  return type(v) == 'number' and v >= 0 and v < 9007199254740992 and v == math.floor(v)
end

-- parse returns the fields of a key's value, blob: states by field, and
-- records by name; or nil if blob is not what the script writes (another
-- client's value: the key is corrupt).
local function parse(blob)
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
    if string.byte(field) == 35 then -- '#': a call's record
      if not whole(v[1]) then
        return nil
      end
      records[field] = v
    else
      for k = 1, #v do
        if not whole(v[k]) then
          return nil
        end
      end
      local alg = algs[string.match(field, '^([%w_]+)|') or '']
      if #v < 5 or (alg and (v[1] < 1 or v[2] < 1)) or (alg == 4 and #v % 2 ~= 0)
          or (alg and alg ~= 4 and #v ~= (alg == 5 and 6 or 5)) then
        return nil
      end
      states[field] = v
    end
  end
  return {states = states, records = records}
end

local ownGrace, clockGrace, replay = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local me, call, low = ARGV[4], ARGV[5], tonumber(ARGV[6])
local nkeep = tonumber(ARGV[7])
local keep = {} -- this store's calls below low that may yet run again: their records stay
for i = 1, nkeep do
  keep[ARGV[7 + i]] = true
end
local a = 8 + nkeep

-- The keys' values, read at once, by key (two requests of one call may
-- be on one key).
local raw = {}
do
  local got = redis.call('MGET', unpack(KEYS))
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
  if blob and string.find(blob, record, 1, true) then
    local v = parse(blob)
    local r = v and v.records[record]
    if r then
      local answers = {}
      for k = 2, #r do -- not unpack: a large call answers more numbers than Lua moves at once
        answers[k - 1] = r[k]
      end
      return answers
    end
  end
end

-- The sets of policies.
local sets = {}
for i = 1, tonumber(ARGV[a]) do
  local set = {}
  a = a + 1
  for j = 1, tonumber(ARGV[a]) do
    local b = a + (j - 1) * 7
    set[j] = {
      alg = tonumber(ARGV[b + 1]), field = ARGV[b + 2], limit = tonumber(ARGV[b + 3]),
      window = tonumber(ARGV[b + 4]), cap = tonumber(ARGV[b + 5]),
      perUs = tonumber(ARGV[b + 6]), perToken = tonumber(ARGV[b + 7]),
    }
  end
  a = a + #set * 7
  sets[i] = set
end
a = a + 1

local redisNow -- Redis's clock, in microseconds: read once, if needed
local function timeNow()
  if not redisNow then
    local t = redis.call('TIME')
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

local function value(key)
  local v = vals[key]
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
    w.longest = math.max(w.longest or 0, longest)
  end
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
    vals[key] = {states = {}, records = v and v.records or {}}
    note(key, set, 0, 0, 0)
    return nil
  end
  if not v then
    return kind <= 2 and {-1} or nil -- a refund finds nothing of its own to give back
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

  if kind == 3 then -- refund
    if not raw[key] and not wrote[key] then
      return nil
    end
    for j, p in ipairs(set) do
      local s = ss[j]
      if p.alg <= 3 then
        bucketRefund(p, s, n)
      elseif p.alg == 4 then
        logRefund(s, n)
      elseif p.alg == 5 then
        s.cur = s.cur - math.min(n, s.cur)
      else
        s.count = s.count - math.min(n, s.count)
      end
      v.states[p.field] = pack(p, s)
    end
    note(key, set, now, grace, nil)
    return nil
  end

  local allowed = true
  local ds = {}
  for j, p in ipairs(set) do
    local d = {}
    decide(p, ss[j], now, n, d)
    ds[j] = d
    allowed = allowed and d.allowed
  end
  local r = {allowed and 1 or 0}
  for j, p in ipairs(set) do
    local d = ds[j]
    if not allowed and d.allowed then
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
  if allowed and kind == 1 then -- last: a key the rules fail on is left as it was
    local longest = 0
    for j, p in ipairs(set) do
      v.states[p.field] = pack(p, ds[j].commit)
      longest = math.max(longest, ds[j].reset)
    end
    note(key, set, now, grace, longest)
  end
  return r
end

local out = {0} -- first: 1 if the call wrote, so that its answers are kept
for i = 1, #KEYS do
  local b = a + (i - 1) * 4
  local kind = tonumber(ARGV[b])
  local ok, r = pcall(serve, KEYS[i], kind, tonumber(ARGV[b + 1]), sets[tonumber(ARGV[b + 2])], tonumber(ARGV[b + 3]))
  if not ok then -- the key's value made the rules fail: it is corrupt
    r = kind <= 2 and {-1} or nil
  end
  if r then
    for k = 1, #r do
      out[#out + 1] = r[k]
    end
  end
end

if #written == 0 then
  return out
end
out[1] = 1

-- Each key written is stored once: its states, those of policies the call
-- does not name (another instance's) while they last, and the records
-- that may still be asked for.
local clock = math.floor(timeNow() / 1000)
local recorded = false
for _, key in ipairs(written) do
  local v, w = vals[key], wrote[key]
  if v then
    local names = {}
    for _, p in ipairs(w.set) do
      names[p.field] = true
    end
    local packed = {}
    local longest = w.longest or 0
    for field, t in pairs(v.states) do
      local keepIt = true
      local p = not names[field] and paramsOf(field, t)
      if p then -- another instance's policy: kept while it lasts
        local ok, left = pcall(function() return resetAfter(p, load(p, t, w.now), w.now) end)
        if ok then
          keepIt = left > 0
          longest = math.max(longest, left)
        end
      end
      if keepIt then
        packed[#packed + 1] = field
        packed[#packed + 1] = t
      end
    end
    local records = 0
    for name, r in pairs(v.records) do
      local own = string.sub(name, 1, #mine) == mine
      if r[1] > clock and not (own and tonumber(string.sub(name, #mine + 1)) < low and not keep[string.sub(name, #mine + 1)]) then
        packed[#packed + 1] = name
        packed[#packed + 1] = r
        records = records + 1
      end
    end
    local holds = false
    if not recorded and #packed > 2 * records then
      -- The first key the call leaves a state in holds its record (a
      -- reset alone needs none: dropping a key again is harmless).
      recorded, holds = true, true
      local r = {clock + replay}
      for j = 1, #out do
        r[j + 1] = out[j]
      end
      packed[#packed + 1] = record
      packed[#packed + 1] = r
      records = records + 1
    end
    if #packed == 0 then
      redis.call('DEL', key)
    elseif not w.longest and raw[key] and not holds then -- a refund's: the TTL stays
      redis.call('SET', key, cmsgpack.pack(packed), 'KEEPTTL')
    elseif not w.longest and raw[key] then -- a refund's, holding the record
      redis.call('SET', key, cmsgpack.pack(packed), 'PX', math.max(redis.call('PTTL', key), replay))
    else
      -- Kept no sooner than its ResetAfter, and grace after; the key
      -- that holds this call's record, as long as the client may send
      -- the call again.
      local px = cdiv(longest, 1000) + w.grace
      if holds or (longest == 0 and records > 0) then
        px = math.max(px, replay) -- the record outlives any attempt of its call
      end
      redis.call('SET', key, cmsgpack.pack(packed), 'PX', math.max(px, 1))
    end
  end
end
return out
