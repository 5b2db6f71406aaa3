"""Lua scripts: every lock operation is exactly one of these, one round trip each.

Each constant starts with a header naming its KEYS, ARGV and reply. Times are server time
(``TIME``) in milliseconds; TTLs are milliseconds. Scripts touch only the keys they are passed,
and all keys of one lock share the hash tag ``{NAME}`` (one cluster slot).

Reply status codes (first element of every acquire reply):

* ``1`` granted, ``0`` held by someone else, ``2`` already held by this owner,
  ``3`` free but reserved for registered waiters (a fair hand-off is under way).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

GRANTED = 1
HELD = 0
ALREADY = 2
RESERVED = 3

HANDED_MS = 2_000
"""The longest lease a direct hand-off grants (ms): provisional, the waiter extends it to its TTL
when it picks the grant up (``_handed`` in core/flows.py). So a waiter that died while enlisted
(SIGKILL between its last attempt and the release) holds the lock for this long, not its whole
TTL (docs/safety.md, "A hand-off to a waiter that died"). The waiter's own ACQUIRE enlists with
it, so a releaser of any version grants what the waiter will confirm."""


@dataclass(frozen=True, slots=True)
class Script:
    """A named Lua script: ``lua`` (for EVAL, its SHA1 ``sha`` for EVALSHA) and the name of the
    same code as a function of the redlease Functions library (``function``, for FCALL).

    ``body`` is the script without the helper prelude: the library defines the helpers once,
    at load, and wraps every body in a function (:data:`LIBRARY`), so both forms run one source.
    """

    name: str
    lua: str
    sha: str = field(init=False)
    body: str = field(init=False)
    function: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "body", self.lua.replace(_PRELUDE, ""))
        if _PRELUDE in self.lua:
            object.__setattr__(self, "lua", self.lua.replace(_PRELUDE, _prelude_for(self.lua)))
        object.__setattr__(self, "sha", hashlib.sha1(self.lua.encode()).hexdigest())  # noqa: S324


def _prelude_for(lua: str) -> str:
    """Only the helper functions ``lua`` calls (directly or through other helpers): building
    unused closures costs Redis time on every call."""
    needed: set[str] = set()
    text = lua
    changed = True
    while changed:
        changed = False
        for name, code in _SNIPPETS.items():
            if name not in needed and f"{name}(" in text:
                needed.add(name)
                text += code
                changed = True
    return "".join(code for name, code in _SNIPPETS.items() if name in needed)


# Shared Lua prelude. ``now_ms()`` is server time in ms as a string, ``clock()`` the same as a
# number (TIME is read at most once, on demand). Hot paths keep values as strings: Lua turns a
# number into text with printf, which costs more than most of the commands they call, and text
# into a number with strtod (``tonumber`` twice; arithmetic on the strings, as ``grant`` compares
# them, once).
# ``enqueue`` registers a blocked acquirer as a waiter (sorted set, score = when the
# registration lapses) so that a release hands the lock to waiters first. ``notify`` runs after
# a release: if live waiters exist it reserves the free lock for them for ``handoff_ms`` and
# pushes wake tokens that the waiters BLPOP.
_SNIPPETS: dict[str, str] = {
    "server_now": """
local now_cache = nil
local function server_now()  -- {ms, us}: server time as strings, TIME read once, on demand
  if not now_cache then
    local t = redis.call('TIME')  -- seconds and microseconds, as strings
    local us = t[2]
    if #us < 6 then us = string.sub('00000' .. us, -6) end
    now_cache = {t[1] .. string.sub(us, 1, 3), t[1] .. us}
  end
  return now_cache
end
""",
    "now_ms": """
local function now_ms()  -- server time in ms as a string
  return server_now()[1]
end
""",
    "clock": """
local function clock()  -- now_ms() as a number (for arithmetic and comparisons)
  return tonumber(now_ms())
end
""",
    "keep_alive": """
local function keep_alive(key, ms)
  local p = redis.call('PTTL', key)
  if p < ms then redis.call('PEXPIRE', key, ms) end
end
""",
    "enqueue": """
local function enqueue(zkey, token, wait)
  if wait > 0 then
    redis.call('ZADD', zkey, clock() + wait, token)
    keep_alive(zkey, wait)
  end
end
""",
    "live": """
local function live(zkey)
  if redis.call('EXISTS', zkey) == 0 then return 0 end
  redis.call('ZREMRANGEBYSCORE', zkey, '-inf', clock() - 1)
  return redis.call('ZCARD', zkey)
end
""",
    "notify": """
local function notify(waiters, handoff, wake, handoff_ms, wake_all)
  local n = live(waiters)
  if n > 0 then
    redis.call('SET', handoff, '1', 'PX', handoff_ms)
    redis.call('DEL', wake)
    local k = 1
    if wake_all then k = math.min(n, 1000) end
    for _ = 1, k do redis.call('RPUSH', wake, '1') end
    redis.call('PEXPIRE', wake, math.max(handoff_ms, 1000))
  end
  return n
end
""",
    "admissible": """
-- May the caller take a free lock? True when there is no reservation, or it is a live
-- registered waiter, or every registered waiter has lapsed (then the third result says the
-- reservation must go). The second result tells whether the caller may be registered (so its
-- registration may need removing): ``registered`` says so when there is no reservation.
local function admissible(waiters, handoff, token, registered)
  if redis.call('EXISTS', handoff) == 0 then return true, registered, false end
  local s = redis.call('ZSCORE', waiters, token)
  if (s and tonumber(s) >= clock()) or live(waiters) == 0 then return true, true, true end
  return false, true, false
end
""",
    "admitted": """
-- admissible(), and the reservation lifted when the caller is admitted through it.
local function admitted(waiters, handoff, token)
  local ok, waiting, reserved = admissible(waiters, handoff, token, true)
  if reserved then redis.call('DEL', handoff) end
  return ok, waiting
end
""",
    "soonest": """
local function soonest(a, b)  -- the earlier of two expiry hints in ms (-1: none known)
  if a < 0 then return b end
  if b < 0 or a < b then return a end
  return b
end
""",
    "forget_at": """
-- ``forget_after`` (docs/safety.md, "Forgotten counters"): the fence counter expires at server
-- time now + ``keep`` ms + the counter's lead over the clock (its value minus the clock in us,
-- when positive), so it is forgotten only after the server clock has passed its value: an
-- absent counter is seeded from the clock, above it. PEXPIREAT from TIME, not PEXPIRE: Redis
-- bases a relative expiry on the script's start, which may be earlier than TIME's reading.
-- ``history``: the history hash, expired ``keep`` ms from now (nil: none).
local function forget_at(fence_key, history, fence, keep)
  local lead = math.ceil((fence - server_now()[2]) / 1000)
  if lead > 0 then keep = keep + lead end
  redis.call('PEXPIREAT', fence_key, string.format('%d', now_ms() + keep))
  if history then redis.call('PEXPIRE', history, keep) end
end
""",
    "grant": """
-- The lease record is compact: owner, holder, fence, acquired_ms, ttl_ms; 'count' only once a
-- reentrant hold is re-entered, 'mode' only for a writer, 'renewed_ms' only once extended
-- (absent: the defaults 1, 'x' and acquired_ms). The transitions count lives in the history.
-- ``ttl``: ms, a string. Returns the fence and the transitions count, as strings (the grant
-- reply is built from strings: Lua turns a number into text with printf).
-- The fencing token is the larger of the counter + 1 and the server clock in microseconds (and
-- of ``min_fence``); the counter keeps it. So a token stays above every earlier one also when
-- the counter was lost or is behind (a restart without data, an old snapshot, a promoted
-- replica that lagged), as long as the server clock does not step back (docs/safety.md).
-- ``min_fence`` -1: a node of a RedLock set. The token is the counter + 1, seeded from the clock
-- only when the counter is absent: the set's nodes stay in step, so a grant needs no second
-- round to raise the others to the highest token, and a counter that is behind (restored,
-- lagging) is the set's restart rule's to catch (docs/quorum.md).
-- ``forget``: nil, or forget_after in ms: the counter and the history then expire (forget_at)
-- ttl + forget ms after this grant (DESIGN's "no TTL" counter is the default, nil).
local function grant(lease, fence_key, history, token, identity, ttl, min_fence, mode, forget)
  local fence
  if min_fence < 0 then
    fence = redis.call('INCR', fence_key)
    if fence == 1 then  -- no counter: seeded from the clock, as on one node
      fence = server_now()[2]
      redis.call('SET', fence_key, fence)
    else
      fence = string.format('%d', fence)
    end
  else
    fence = server_now()[2]
    local prev = redis.call('SET', fence_key, fence, 'GET')
    if prev and prev - fence >= 0 then  -- the counter is ahead of the clock
      fence = string.format('%d', prev + 1)
      redis.call('SET', fence_key, fence)
    end
    if min_fence > 0 and fence - min_fence < 0 then
      fence = string.format('%d', min_fence)
      redis.call('SET', fence_key, fence)
    end
  end
  local h = redis.call('HMGET', history, 'holder', 'transitions')
  local transitions = h[2] or '0'
  if h[1] ~= identity then
    transitions = string.format('%d', tonumber(transitions) + 1)
    redis.call('HSET', history, 'holder', identity, 'transitions', transitions,
      'changed_ms', now_ms())
  end
  if mode == 'x' then
    redis.call('HSET', lease, 'owner', token, 'holder', identity, 'fence', fence,
      'acquired_ms', now_ms(), 'ttl_ms', ttl)
  else
    redis.call('HSET', lease, 'owner', token, 'holder', identity, 'fence', fence,
      'acquired_ms', now_ms(), 'ttl_ms', ttl, 'mode', mode)
  end
  redis.call('PEXPIRE', lease, ttl)
  if forget then forget_at(fence_key, history, fence, ttl + forget) end
  return fence, transitions
end
""",
    "enlist": """
-- Register ``token`` for a direct hand-off: a release grants the lease to the head waiter itself
-- if it is enlisted here (``direct`` hash: token -> 'ttl_ms identity [box]'; a semaphore's
-- waiter, ``limit`` not nil: 'ttl_ms:limit identity [box]', handed only a slot below its limit).
-- ``ttl`` (ms, a string) is the waiter's; a hand-off grants at most HANDED_MS ms of it, which
-- the waiter extends to its TTL when it picks the grant up: a waiter that died meanwhile holds the
-- lock that long, not its TTL. ``box``: the mailbox that the waiter's process listens on for
-- every waiter of this lock ('': its own list).
local function enlist(direct, token, wait, ttl, limit, identity, box)
  if wait > 0 then
    if ttl - HANDED_MS > 0 then ttl = 'HANDED_MS' end
    if limit then ttl = ttl .. ':' .. limit end
    if box and box ~= '' then
      redis.call('HSET', direct, token, ttl .. ' ' .. identity .. ' ' .. box)
    else
      redis.call('HSET', direct, token, ttl .. ' ' .. identity)
    end
    keep_alive(direct, wait)
  end
end
""".replace("HANDED_MS", str(HANDED_MS)),
    "pass_on": """
-- After a release of an exclusive lease: if the head waiter (the registration that lapses
-- first) is enlisted for a direct hand-off, grant it the lease here and push the grant
-- 'fence now_ms transitions' onto its own list (wake .. ':' .. token, same slot), or
-- 'fence now_ms transitions token' onto its process's mailbox (wake .. ':' .. box) when it
-- enlisted with one; its process BLPOPs that list. The grant is the TTL the waiter enlisted
-- with (at most HANDED_MS, see enlist), which it extends when it picks the grant up. Otherwise
-- wake waiters (notify). A grant to a waiter that died meanwhile expires with that provisional
-- TTL; one that gave up is released by LEAVE.
-- No waiters (the uncontended case): one EXISTS. The head is read first: when it is live, no
-- registration has lapsed (it lapses first), so the common hand-off reads the queue once.
local function pass_on(lease, fence_key, history, waiters, handoff, wake, direct, handoff_ms,
    wake_all, forget)
  if not direct or wake_all then
    return notify(waiters, handoff, wake, handoff_ms, wake_all)
  end
  if redis.call('EXISTS', waiters) == 0 then return 0 end
  local first = redis.call('ZRANGE', waiters, 0, 0, 'WITHSCORES')
  if #first == 0 then return 0 end
  local head = first[1]
  if tonumber(first[2]) < clock() then
    -- enlistments of registrations that lapsed (waiters that died) go with them
    local lapsed = redis.call('ZRANGEBYSCORE', waiters, '-inf', clock() - 1)
    redis.call('HDEL', direct, unpack(lapsed))
    redis.call('ZREMRANGEBYSCORE', waiters, '-inf', clock() - 1)
    head = redis.call('ZRANGE', waiters, 0, 0)[1]
    if not head then return 0 end
  end
  local info = redis.call('HGET', direct, head)
  if not info then return notify(waiters, handoff, wake, handoff_ms, false) end
  local sep = string.find(info, ' ', 1, true)
  local ttl = string.sub(info, 1, sep - 1)
  local colon = string.find(ttl, ':', 1, true)
  if colon then  -- a semaphore's waiter ('ttl:limit'): only a slot below its own limit
    local limit = tonumber(string.sub(ttl, colon + 1))
    ttl = string.sub(ttl, 1, colon - 1)
    if tonumber(string.match(lease, ':slot:(%d+)$') or '0') >= limit then
      return notify(waiters, handoff, wake, handoff_ms, false)
    end
  end
  local identity = string.sub(info, sep + 1)
  local sep2 = string.find(identity, ' ', 1, true)
  local box, item = wake .. ':' .. head, ''
  if sep2 then
    box, item = wake .. ':' .. string.sub(identity, sep2 + 1), ' ' .. head
    identity = string.sub(identity, 1, sep2 - 1)
  end
  redis.call('ZREM', waiters, head)
  redis.call('HDEL', direct, head)
  local fence, transitions = grant(lease, fence_key, history, head, identity, ttl, 0, 'x',
    forget)
  redis.call('RPUSH', box, fence .. ' ' .. now_ms() .. ' ' .. transitions .. item)
  keep_alive(box, tonumber(ttl))
  redis.call('DEL', handoff)
  return 1
end
""",
    "left": """
-- After waiters left the queue of the lock ``lease`` (``slots``: every lease key of the lock, a
-- semaphore's too): readers queued behind the last waiting writer may go now; a wake token the
-- leavers may have taken goes to the next waiter when the lock is free and reserved for
-- waiters; no reservation without live waiters. Returns the live waiters.
local function left(lease, slots, waiters, handoff, wake, writers, was_writer, handoff_ms)
  local n = live(waiters)
  if was_writer and live(writers) == 0 then
    -- readers queued behind this writer may go now
    notify(waiters, handoff, wake, handoff_ms, true)
  elseif n > 0 and redis.call('EXISTS', lease, unpack(slots, 2)) < #slots
      and redis.call('EXISTS', handoff) == 1 then
    redis.call('RPUSH', wake, '1')
    redis.call('PEXPIRE', wake, 1000)
  elseif n == 0 then
    redis.call('DEL', handoff)
  end
  return n
end
""",
    "slot_of": """
-- A semaphore's slots (``leases``: the lease keys of slots 0 .. limit-1, see LockKeys.slot):
-- the slot ``token`` owns, else the first free one, else (every slot held) the first; then its
-- owner (``token``, nil when free), and when every slot is held a holder and the soonest
-- expiry (ms). The owner token names the slot: nobody outside the scripts tracks slot numbers.
local function slot_of(leases, token)
  local free, holder, hint = nil, '', -1
  for _, key in ipairs(leases) do
    local cur = redis.call('HMGET', key, 'owner', 'holder')
    if cur[1] == token then return key, token, '', -1 end
    if not cur[1] then
      free = free or key
    else
      if holder == '' then holder = cur[2] end
      hint = soonest(hint, redis.call('PTTL', key))
    end
  end
  if free then return free, nil, '', -1 end
  return leases[1], 'held', holder, hint
end
""",
    "owned_slot": """
-- The key among ``leases`` (a semaphore's slots) whose lease ``token`` owns (nil: none).
local function owned_slot(leases, token)
  for _, key in ipairs(leases) do
    if redis.call('HGET', key, 'owner') == token then return key end
  end
  return nil
end
""",
}
_PRELUDE = "--@prelude\n"  # replaced by the helper functions a script uses (see Script)


ACQUIRE = Script(
    "acquire",
    """
-- Acquire an exclusive lease (mutex or reentrant) on one lock, or on n locks held together as
-- one lease (multi-key, one node): all or nothing, one fencing token above every earlier token
-- of each lock (every counter and lease record carries it).
-- KEYS, five per lock (KEYS[1..5] the first lock, KEYS[6..10] the second, ...):
--   KEYS[1] lease hash  KEYS[2] fence counter  KEYS[3] history hash  KEYS[4] waiters zset
--   KEYS[5] handoff flag
-- ARGV[1] owner token  ARGV[2] ttl ms  ARGV[3] holder identity  ARGV[4] reentrant '1'|'0'
-- ARGV[5] waiter registration ms (0: do not register; -1, direct hand-off only: the caller's
--   last attempt, which, refused by a holder, also drops its registration: no LEAVE after it)
-- ARGV[6] minimum fence (0: none; -1: a node of a RedLock set, its counter kept in step, see grant)
-- ARGV[7] '0': the owner is registered as a waiter nowhere (absent: it may be)
-- ARGV[8] the caller's process mailbox for a direct hand-off (absent or '': its own list)
-- ARGV[9] a counting semaphore (one lock): m, the number of its slots after slot 0, whose
--   lease keys (LockKeys.slot) are the last m KEYS, after every key above (absent or '0': a mutex)
-- ARGV[10] forget_after ms (absent: the counter and history keep no TTL; see grant)
-- With one lock, two more keys may follow: KEYS[6] direct hand-off hash, KEYS[7] the caller's
-- own grant list (wake list .. ':' .. owner token). A refused caller then
-- enlists for a direct hand-off (see pass_on; granted at most HANDED_MS, see enlist); a caller
-- that finds the lease already granted to it that way (it stopped waiting before the grant
-- arrived) takes it with a fresh TTL.
-- One lock, free and not reserved, with ARGV[7] '0': granted by the first branch (no waiter
-- bookkeeping to do), with the same reply, keys and token rule (grant).
-- A semaphore grants the first free slot (KEYS[1] is slot 0) and finds the caller's own lease in
-- any slot; refused when every slot is held (hint: the soonest expiry, holder: one of them).
-- Returns 'fence count now_ms transitions' granted (a string; transitions -1 on re-entry)
--         {0, pttl_ms, holder, i...} held   {3, pttl_ms, '', i...} reserved for waiters
--           (i...: positions of the locks that refused; the caller is registered there only;
--            pttl_ms: the soonest of their expiries)
--         {2, fence, count} already held by this owner (any of the locks)
--         (a lease handed over directly is popped as 'fence now_ms transitions' from KEYS[7])
"""
    + _PRELUDE
    + """
local token = ARGV[1]
local ttl = ARGV[2]
-- The uncontended case first: one lock, free and not reserved, the caller registered nowhere
-- (one EXISTS for both keys). What the general path below does then, without its bookkeeping.
if #KEYS < 10 and ARGV[7] == '0' and (not ARGV[9] or ARGV[9] == '0')
    and redis.call('EXISTS', KEYS[1], KEYS[5]) == 0 then
  local fence, transitions = grant(KEYS[1], KEYS[2], KEYS[3], token, ARGV[3], ttl,
    ARGV[6] == '0' and 0 or tonumber(ARGV[6]), 'x', ARGV[10])
  return fence .. ' 1 ' .. now_ms() .. ' ' .. transitions
end
local registered = ARGV[7] ~= '0'
local m = tonumber(ARGV[9] or '0')
local n = math.floor((#KEYS - m) / 5)
local direct = nil
if #KEYS - m > 5 * n then direct = KEYS[5 * n + 1] end
local slots = nil  -- a semaphore's slots, slot 0 first
if m > 0 then slots = {KEYS[1], unpack(KEYS, #KEYS - m + 1)} end
local status, hint, holder, mine = 1, -1, '', nil
local refused, admit = nil, {}  -- admit[i]: 1 remove the caller's registration, +2 the reservation
local leases = {}  -- leases[i]: the lease key lock i grants (a semaphore: its chosen slot)
for i = 1, n do
  local lease, owner = KEYS[5 * i - 4], nil
  if slots then
    lease, owner, holder, hint = slot_of(slots, token)
  else
    owner = redis.call('HGET', lease, 'owner')
  end
  leases[i] = lease
  if owner == token then
    mine = lease
  elseif owner then
    status = 0
    if not slots then
      holder = redis.call('HGET', lease, 'holder')
      hint = soonest(hint, redis.call('PTTL', lease))
    end
    refused = refused or {}
    refused[#refused + 1] = i
  else
    local ok, waiting, reserved = admissible(KEYS[5 * i - 1], KEYS[5 * i], token,
      registered)
    if ok then
      admit[i] = (waiting and 1 or 0) + (reserved and 2 or 0)
    else
      if status == 1 then status = 3 end
      hint = soonest(hint, redis.call('PTTL', KEYS[5 * i]))
      refused = refused or {}
      refused[#refused + 1] = i
    end
  end
end
if mine then
  local cur = redis.call('HMGET', mine, 'fence', 'count')
  local fence, count = cur[1], cur[2] or '1'
  if direct and registered and redis.call('HEXISTS', direct, token) == 0 then
    -- handed over to this waiter directly after it stopped waiting: take it, TTL from now
    redis.call('ZREM', KEYS[4], token)
    redis.call('DEL', KEYS[7])
    redis.call('HSET', mine, 'renewed_ms', now_ms(), 'ttl_ms', ttl)
    redis.call('PEXPIRE', mine, ttl)
    local t = redis.call('HGET', KEYS[3], 'transitions') or '0'
    return fence .. ' ' .. count .. ' ' .. now_ms() .. ' ' .. t
  end
  if ARGV[4] == '1' and n == 1 then
    count = string.format('%d', tonumber(count) + 1)
    redis.call('HSET', mine, 'count', count, 'renewed_ms', now_ms(), 'ttl_ms', ttl)
    redis.call('PEXPIRE', mine, ttl)
    return fence .. ' ' .. count .. ' ' .. now_ms() .. ' -1'
  end
  return {2, tonumber(fence), tonumber(count)}
end
if refused then
  local wait = tonumber(ARGV[5])
  for _, i in ipairs(refused) do enqueue(KEYS[5 * i - 1], token, wait) end
  if direct then
    enlist(direct, token, wait, ttl, m > 0 and (m + 1) or nil, ARGV[3], ARGV[8])
  end
  for i, a in pairs(admit) do  -- no stale registration where the lock was free
    if a % 2 == 1 then redis.call('ZREM', KEYS[5 * i - 1], token) end
  end
  if wait < 0 and status == 0 and direct then  -- the last attempt: the caller leaves here
    redis.call('ZREM', KEYS[4], token)
    redis.call('HDEL', direct, token)
    redis.call('DEL', KEYS[7])
  end
  return {status, hint, holder, unpack(refused)}
end
local floor = tonumber(ARGV[6])
if n > 1 then
  for i = 1, n do
    floor = math.max(floor, tonumber(redis.call('GET', KEYS[5 * i - 3]) or '0') + 1)
  end
end
local fence, transitions = nil, nil
for i = 1, n do
  local a = admit[i]
  if a >= 2 then redis.call('DEL', KEYS[5 * i]) end
  if a % 2 == 1 then
    redis.call('ZREM', KEYS[5 * i - 1], token)
    if direct then redis.call('HDEL', direct, token) end
  end
  local t
  fence, t = grant(leases[i], KEYS[5 * i - 3], KEYS[5 * i - 2], token, ARGV[3], ttl,
    floor, 'x', ARGV[10])
  if not transitions or tonumber(t) > tonumber(transitions) then transitions = t end
end
return fence .. ' 1 ' .. now_ms() .. ' ' .. transitions
""",
)

RELEASE = Script(
    "release",
    """
-- Release an exclusive lease (mutex, reentrant, the writer of a read-write lock, or every lock
-- of a multi-key lease).
-- KEYS, four per lock (KEYS[1..4] the first lock, KEYS[5..8] the second, ...):
--   KEYS[1] lease hash  KEYS[2] waiters zset  KEYS[3] handoff flag  KEYS[4] wake list
-- With one lock, three more keys may follow for a direct hand-off (see pass_on): KEYS[5] fence
-- counter  KEYS[6] history hash  KEYS[7] direct hand-off hash. The head waiter's own grant list
-- (KEYS[4] .. ':' .. its token, same slot) is the one key not passed: only the script knows it.
-- ARGV[1] owner token  ARGV[2] '1' release every reentrant count, '0' one
-- ARGV[3] handoff ms   ARGV[4] '1' wake every waiter, '0' one
-- ARGV[5] a counting semaphore (one lock, every count): m, the number of its slots after slot 0,
--   whose lease keys are the last m KEYS (absent: a mutex). The slot the owner holds is freed
--   and passed on to the head waiter. '0': a mutex (with ARGV[6])
-- ARGV[6] forget_after ms of the lease handed on (absent: none; see grant)
-- Returns the remaining reentrant count (0 = lease gone) when released, -1 when not the owner
--   (of at least one lock; the owner's other locks are released)
-- One lock with ARGV[2] '1' (the common release) takes the first branch: the same steps.
"""
    + _PRELUDE
    + """
local m = tonumber(ARGV[5] or '0')
if #KEYS - m < 8 and ARGV[2] == '1' then  -- one lock, every count: the loop below, for n = 1
  local lease = KEYS[1]
  if m > 0 then
    lease = owned_slot({KEYS[1], unpack(KEYS, #KEYS - m + 1)}, ARGV[1])
    if not lease then return -1 end
  elseif redis.call('HGET', lease, 'owner') ~= ARGV[1] then
    return -1
  end
  redis.call('DEL', lease)
  local direct = nil
  if #KEYS - m > 4 then direct = KEYS[7] end
  pass_on(lease, KEYS[5], KEYS[6], KEYS[2], KEYS[3], KEYS[4], direct, ARGV[3], ARGV[4] == '1',
    ARGV[6])
  return 0
end
local n = math.floor(#KEYS / 4)
local full = ARGV[2] == '1'
local owned, count = 0, 0
for i = 1, 4 * n, 4 do
  local owner, held = nil, nil
  if full then
    owner = redis.call('HGET', KEYS[i], 'owner')
  else
    local cur = redis.call('HMGET', KEYS[i], 'owner', 'count')
    owner, held = cur[1], cur[2]
  end
  if owner == ARGV[1] then
    owned = owned + 1
    if held and tonumber(held) > 1 then
      count = redis.call('HINCRBY', KEYS[i], 'count', -1)
    else
      redis.call('DEL', KEYS[i])
      pass_on(KEYS[i], KEYS[5], KEYS[6], KEYS[i + 1], KEYS[i + 2], KEYS[i + 3], KEYS[7],
        ARGV[3], ARGV[4] == '1', ARGV[6])
    end
  end
end
if owned < n then return -1 end
return count
""",
)

EXTEND = Script(
    "extend",
    """
-- Extend an exclusive lease held by the owner: one lock, or every lock of a multi-key lease
-- (all or none: a lease that lost one of its locks is lost, and is not kept alive in part).
-- KEYS[1] lease hash (KEYS[2..n]: those of the other locks of a multi-key lease)
-- ARGV[1] owner token  ARGV[2] new ttl ms
-- ARGV[3] present and not '': a counting semaphore; KEYS are the lease keys of its slots, and
--   the one the owner holds is extended
-- ARGV[4] forget_after ms (one lock; absent: none): the last two KEYS are then the lock's fence
--   counter and history hash, whose expiries (see grant) move to at least ttl + forget from now
--   (only ever later, so the counter's rule holds; a counter without a TTL keeps none)
-- Returns {1, fence, now_ms} extended  {0, 0, now_ms} not the owner (or expired); fence and
--   now_ms as strings
"""
    + _PRELUDE
    + """
local leases = KEYS
if ARGV[4] then leases = {unpack(KEYS, 1, #KEYS - 2)} end
if ARGV[3] and ARGV[3] ~= '' then
  local mine = owned_slot(leases, ARGV[1])
  if not mine then return {0, 0, now_ms()} end
  leases = {mine}
end
local fence = 0
for i = 1, #leases do
  local cur = redis.call('HMGET', leases[i], 'owner', 'fence')
  if cur[1] ~= ARGV[1] then return {0, 0, now_ms()} end
  fence = cur[2]
end
for i = 1, #leases do
  redis.call('HSET', leases[i], 'renewed_ms', now_ms(), 'ttl_ms', ARGV[2])
  redis.call('PEXPIRE', leases[i], ARGV[2])
end
if ARGV[4] then
  local keep = ARGV[2] + ARGV[4]
  local p = redis.call('PTTL', KEYS[#KEYS - 1])
  if p >= 0 and p < keep then redis.call('PEXPIRE', KEYS[#KEYS - 1], keep) end
  keep_alive(KEYS[#KEYS], keep)
end
return {1, fence, now_ms()}
""",
)

LEAVE = Script(
    "leave",
    """
-- A blocked acquirer gives up (timeout, cancellation): drop its registration and, if the lock is
-- free and reserved for waiters, pass the wake token on so no waiter sleeps in vain.
-- KEYS, five per lock (KEYS[1..5] the first lock, KEYS[6..10] the second, ...):
--   KEYS[1] lease hash  KEYS[2] waiters zset  KEYS[3] handoff flag  KEYS[4] wake list
--   KEYS[5] writers-waiting zset
-- With one lock, four more keys may follow for a direct hand-off: KEYS[6] fence counter
-- KEYS[7] history hash  KEYS[8] direct hand-off hash  KEYS[9] the caller's own grant list. A
-- lease handed over to the caller while it gave up is released and passed on.
-- ARGV[1] owner token  ARGV[2] handoff ms
-- ARGV[3] a counting semaphore (one lock): m, the number of its slots after slot 0, whose lease
--   keys are the last m KEYS (absent or '0': a mutex); a lease handed over is found in any slot,
--   and "free" means some slot is free
-- ARGV[4] forget_after ms of a lease passed on (absent: none; see grant)
-- Returns {live waiters, summed over the locks}
"""
    + _PRELUDE
    + """
local s = tonumber(ARGV[3] or '0')
local m = 5 * math.floor((#KEYS - s) / 5)
local slots = {KEYS[1]}
if s > 0 then slots = {KEYS[1], unpack(KEYS, #KEYS - s + 1)} end
if #KEYS - s >= m + 3 then
  redis.call('HDEL', KEYS[8], ARGV[1])
  redis.call('DEL', KEYS[9])
  local lease = owned_slot(slots, ARGV[1])
  if lease then
    redis.call('DEL', lease)
    redis.call('ZREM', KEYS[2], ARGV[1])
    pass_on(lease, KEYS[6], KEYS[7], KEYS[2], KEYS[3], KEYS[4], KEYS[8], tonumber(ARGV[2]),
      false, ARGV[4])
    return {live(KEYS[2])}
  end
end
local total = 0
for i = 1, m, 5 do
  local waiters, writers = KEYS[i + 1], KEYS[i + 4]
  redis.call('ZREM', waiters, ARGV[1])
  local was_writer = redis.call('ZREM', writers, ARGV[1]) == 1
  total = total + left(KEYS[i], slots, waiters, KEYS[i + 2], KEYS[i + 3], writers, was_writer,
    tonumber(ARGV[2]))
end
return {total}
""",
)

GIVE_UP = Script(
    "give_up",
    """
-- The listener of a lock's waiters in one process gives up for those whose deadlines passed
-- (core/waiting.py): read the lease's owner and holder (what their last attempts would have
-- been told) and, when another owner holds it, take every one of them off the queue here, as
-- LEAVE would (the lock is held: nothing to pass on). So they are gone before their LockTimeout
-- is raised: nothing their process sends afterwards (it may close its client or exit at once)
-- is needed, and no release can grant the lease to a waiter that left. A waiter that the lease
-- was granted to meanwhile is the owner: it stays, and its own last attempt takes the lease.
-- KEYS[1] lease hash  KEYS[2] waiters zset  KEYS[3] handoff flag  KEYS[4] wake list
-- KEYS[5] writers-waiting zset  KEYS[6] direct hand-off hash (absent: no direct hand-off)
-- ARGV[1] handoff ms  ARGV[2..] the waiters' owner tokens
-- Returns {owner, holder, fence} (nils: free). On a RedLock set it runs on every node, and the
-- lock view's quorum rule judges the replies (owner, holder and fence, as the view reads them).
"""
    + _PRELUDE
    + """
local cur = redis.call('HMGET', KEYS[1], 'owner', 'holder', 'fence')
if not cur[1] then return cur end
local gone = {}
for i = 2, #ARGV do
  if ARGV[i] ~= cur[1] then gone[#gone + 1] = ARGV[i] end
end
local was_writer = false
for i = 1, #gone, 1000 do  -- unpack in parts: Lua's C stack takes a few thousand values
  local j = math.min(i + 999, #gone)
  redis.call('ZREM', KEYS[2], unpack(gone, i, j))
  if KEYS[6] then redis.call('HDEL', KEYS[6], unpack(gone, i, j)) end
  was_writer = redis.call('ZREM', KEYS[5], unpack(gone, i, j)) > 0 or was_writer
end
if #gone > 0 then
  left(KEYS[1], {KEYS[1]}, KEYS[2], KEYS[3], KEYS[4], KEYS[5], was_writer, tonumber(ARGV[1]))
end
return cur
""",
)

ACQUIRE_READ = Script(
    "acquire_read",
    """
-- Acquire a shared (reader) lease of a read-write lock. Refused while a writer holds the lock
-- or while a writer waits (writer preference: a stream of readers cannot starve a writer).
-- KEYS[1] lease hash (the writer)  KEYS[2] readers zset  KEYS[3] writers-waiting zset
-- KEYS[4] waiters zset  KEYS[5] handoff flag  KEYS[6] fence counter
-- ARGV[1] owner token  ARGV[2] ttl ms  ARGV[3] waiter registration ms (0: do not register)
-- Returns {1, fence, readers, now_ms} granted  {0, wait hint ms (-1 unknown), holder} refused
--         {2, fence, readers} already a reader  {3, pttl ms, ''} reserved for waiters
"""
    + _PRELUDE
    + """
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local wait = tonumber(ARGV[3])
local fence = tonumber(redis.call('GET', KEYS[6]) or '0')
local mine = redis.call('ZSCORE', KEYS[2], token)
if mine and tonumber(mine) >= clock() then
  return {2, fence, redis.call('ZCARD', KEYS[2])}
end
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder then
  enqueue(KEYS[4], token, wait)
  return {0, redis.call('PTTL', KEYS[1]), holder}
end
if live(KEYS[3]) > 0 then
  enqueue(KEYS[4], token, wait)
  return {0, -1, ''}
end
local ok, waiting = admitted(KEYS[4], KEYS[5], token)
if not ok then
  enqueue(KEYS[4], token, wait)
  return {3, redis.call('PTTL', KEYS[5]), ''}
end
if waiting then redis.call('ZREM', KEYS[4], token) end
redis.call('ZADD', KEYS[2], clock() + ttl, token)
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
keep_alive(KEYS[2], tonumber(last[2]) - clock())
return {1, fence, live(KEYS[2]), clock()}
""",
)

ACQUIRE_WRITE = Script(
    "acquire_write",
    """
-- Acquire the exclusive (writer) lease of a read-write lock: no writer and no live reader.
-- A refused writer registers as waiting, which stops new readers from entering.
-- KEYS[1] lease hash  KEYS[2] readers zset  KEYS[3] writers-waiting zset  KEYS[4] waiters zset
-- KEYS[5] handoff flag  KEYS[6] fence counter  KEYS[7] history hash
-- ARGV[1] owner token  ARGV[2] ttl ms  ARGV[3] holder identity
-- ARGV[4] waiter registration ms (0: do not register)
-- Returns 'fence 1 now_ms transitions' granted  {0, wait hint ms, holder} refused
--         {2, fence, count} already the writer  {3, pttl ms, ''} reserved for waiters
"""
    + _PRELUDE
    + """
local token = ARGV[1]
local wait = tonumber(ARGV[4])
local cur = redis.call('HMGET', KEYS[1], 'owner', 'holder', 'fence', 'count')
if cur[1] == token then return {2, tonumber(cur[3]), tonumber(cur[4] or '1')} end
if cur[1] then
  enqueue(KEYS[4], token, wait)
  enqueue(KEYS[3], token, wait)
  return {0, redis.call('PTTL', KEYS[1]), cur[2]}
end
if live(KEYS[2]) > 0 then
  enqueue(KEYS[4], token, wait)
  enqueue(KEYS[3], token, wait)
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  return {0, tonumber(last[2]) - clock(), ''}
end
local ok, waiting = admitted(KEYS[4], KEYS[5], token)
if not ok then
  enqueue(KEYS[4], token, wait)
  enqueue(KEYS[3], token, wait)
  return {3, redis.call('PTTL', KEYS[5]), ''}
end
if waiting then redis.call('ZREM', KEYS[4], token) end
redis.call('ZREM', KEYS[3], token)
local fence, transitions = grant(KEYS[1], KEYS[6], KEYS[7], token, ARGV[3], ARGV[2], 0, 'w')
return fence .. ' 1 ' .. now_ms() .. ' ' .. transitions
""",
)

RELEASE_READ = Script(
    "release_read",
    """
-- Release a reader lease; when the last reader leaves, wake the waiters (writers first in line).
-- KEYS[1] readers zset  KEYS[2] waiters zset  KEYS[3] handoff flag  KEYS[4] wake list
-- ARGV[1] owner token  ARGV[2] handoff ms
-- Returns the readers left when released, -1 when not a reader (or its share expired)
"""
    + _PRELUDE
    + """
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if (not s) or tonumber(s) < clock() then return -1 end
local left = live(KEYS[1])
if left == 0 then notify(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[2]), true) end
return left
""",
)

EXTEND_READ = Script(
    "extend_read",
    """
-- Extend a reader lease.
-- KEYS[1] readers zset
-- ARGV[1] owner token  ARGV[2] new ttl ms
-- Returns {1, 0, now_ms} extended  {0, 0, now_ms} not a reader (or its share expired)
"""
    + _PRELUDE
    + """
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not s) or tonumber(s) < clock() then return {0, 0, clock()} end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', clock() + ttl, ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
keep_alive(KEYS[1], tonumber(last[2]) - clock())
return {1, 0, clock()}
""",
)

HEARTBEAT = Script(
    "heartbeat",
    """
-- Register (or refresh) a candidate for leadership of a lock.
-- KEYS[1] candidates zset
-- ARGV[1] identity  ARGV[2] heartbeat ttl ms (0: withdraw the candidate)
-- Returns {live candidates, now_ms}
"""
    + _PRELUDE
    + """
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('ZADD', KEYS[1], clock() + ttl, ARGV[1])
  keep_alive(KEYS[1], ttl)
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return {live(KEYS[1]), clock()}
""",
)

STATUS = Script(
    "status",
    """
-- Read the live state of a lock in one round trip (read-only).
-- KEYS[1] lease hash  KEYS[2] fence counter  KEYS[3] history hash  KEYS[4] readers zset
-- KEYS[5] candidates zset  KEYS[6] waiters zset
-- KEYS[7..] a counting semaphore's slots after slot 0 (KEYS[1] is slot 0), if any
-- Returns {now_ms, lease pttl ms, {lease field, value, ...}, fence, {history field, value, ...},
--          live readers, {live candidate identities}, live waiters
--          [, {{slot pttl ms, {slot field, value, ...}}, ...} with slot keys]}

local t = redis.call('TIME')
local ms = string.sub('00000' .. t[2], -6, -4)  -- the milliseconds of the second, 3 digits
local now = t[1] .. ms  -- server time in ms as text: what Redis would print for the number
local reply = {t[1] * 1000 + ms, redis.call('PTTL', KEYS[1]), redis.call('HGETALL', KEYS[1]),
  tonumber(redis.call('GET', KEYS[2]) or '0'), redis.call('HGETALL', KEYS[3]),
  redis.call('ZCOUNT', KEYS[4], now, '+inf'),
  redis.call('ZRANGEBYSCORE', KEYS[5], now, '+inf'),
  redis.call('ZCOUNT', KEYS[6], now, '+inf')}
if #KEYS > 6 then
  local slots = {}
  for i = 7, #KEYS do
    slots[#slots + 1] = {redis.call('PTTL', KEYS[i]), redis.call('HGETALL', KEYS[i])}
  end
  reply[9] = slots
end
return reply
""",
)

FORCE_RELEASE = Script(
    "force_release",
    """
-- Administrative release (operator's force-release): remove the writer/holder lease and every
-- reader, keep the fence counter, wake all waiters.
-- KEYS[1] lease hash  KEYS[2] readers zset  KEYS[3] waiters zset  KEYS[4] handoff flag
-- KEYS[5] wake list  KEYS[6..] a counting semaphore's slots after slot 0 (removed too)
-- ARGV[1] handoff ms
-- Returns {leases removed (slots included), readers removed}
"""
    + _PRELUDE
    + """
local had = redis.call('DEL', KEYS[1], unpack(KEYS, 6))
local readers = redis.call('ZCARD', KEYS[2])
redis.call('DEL', KEYS[2])
notify(KEYS[3], KEYS[4], KEYS[5], tonumber(ARGV[1]), true)
return {had, readers}
""",
)

RAISE_FENCE = Script(
    "raise_fence",
    """
-- Raise a lock's fence counter to at least a minimum (RedLock: a quorum holder's token must be
-- on a quorum of counters before it is granted; also used to re-seed a node restarted empty).
-- KEYS[1] fence counter  KEYS[2] lease hash (KEYS[3..]: a counting semaphore's other slots; the
--   owner's lease record is found in any of them)
-- ARGV[1] minimum fence  ARGV[2] owner token ('' : counter only)
-- ARGV[3] ttl + forget_after ms (absent: none): a raised counter then expires as a granted one
--   does (forget_at); absent, SET leaves it without a TTL
-- Returns {counter after, 1 if the owner's lease record now carries the fence else 0}
"""
    + _PRELUDE
    + """
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local min = tonumber(ARGV[1])
if cur < min then
  redis.call('SET', KEYS[1], ARGV[1])  -- the text as given: a Lua number may print inexactly
  cur = min
  if ARGV[3] then forget_at(KEYS[1], nil, ARGV[1], tonumber(ARGV[3])) end
end
local updated = 0
if ARGV[2] ~= '' then
  for i = 2, #KEYS do
    if redis.call('HGET', KEYS[i], 'owner') == ARGV[2] then
      redis.call('HSET', KEYS[i], 'fence', ARGV[1])
      updated = 1
      break
    end
  end
end
return {cur, updated}
""",
)

RETIRE = Script(
    "retire",
    """
-- Delete every key of a lock that nobody uses any more (`redlease retire`): the fence counter
-- and history included, which otherwise never expire. Refused while the lease is held, a
-- reader or a waiter is live, or a candidate is alive (a running sidecar would take it again).
-- KEYS[1] lease hash  KEYS[2] readers zset  KEYS[3] waiters zset  KEYS[4] candidates zset
-- KEYS[5..] the lock's other keys (fence, history, handoff, wake, writers-waiting, direct,
--   and last the slots of a counting semaphore after slot 0)
-- ARGV[1] the number of slot keys at the end of KEYS (absent: none); refused while one is held
-- Returns {1, keys deleted} retired   {0, reason} refused: 'held' | 'readers' | 'waiters' |
--   'candidates'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, 'held'} end
local s = tonumber(ARGV[1] or '0')
if s > 0 and redis.call('EXISTS', unpack(KEYS, #KEYS - s + 1)) > 0 then return {0, 'held'} end
if redis.call('ZCOUNT', KEYS[2], now, '+inf') > 0 then return {0, 'readers'} end
if redis.call('ZCOUNT', KEYS[3], now, '+inf') > 0 then return {0, 'waiters'} end
if redis.call('ZCOUNT', KEYS[4], now, '+inf') > 0 then return {0, 'candidates'} end
return {1, redis.call('DEL', unpack(KEYS))}
""",
)

ALL_SCRIPTS = (
    ACQUIRE,
    RELEASE,
    EXTEND,
    LEAVE,
    GIVE_UP,
    ACQUIRE_READ,
    ACQUIRE_WRITE,
    RELEASE_READ,
    EXTEND_READ,
    HEARTBEAT,
    STATUS,
    FORCE_RELEASE,
    RAISE_FENCE,
    RETIRE,
)


def _library(all_scripts: tuple[Script, ...]) -> tuple[str, str]:
    """The redlease Functions library (Redis 7+, Valkey): every helper defined once, at load, and
    every script's body as a function. Its name and its function names carry a version (a hash
    of the code), so clients of different versions can share a server; ``FUNCTION LOAD
    REPLACE`` of the same version is idempotent. Sets each script's ``function``."""
    version = hashlib.sha1("".join(s.sha for s in all_scripts).encode()).hexdigest()[:12]  # noqa: S324
    parts = [f"#!lua name=redlease_{version}\n", *_SNIPPETS.values()]
    for s in all_scripts:
        name = f"redlease_{version}_{s.name}"
        object.__setattr__(s, "function", name)
        # now_cache is the helpers' per-call TIME cache: a library keeps it between calls
        parts.append(
            f"redis.register_function('{name}', function(KEYS, ARGV)\nnow_cache = nil\n"
            f"{s.body}\nend)\n"
        )
    return f"redlease_{version}", "".join(parts)


# loaded where none is, FCALL'd only where the code under LIBRARY_NAME is this (scripting.Scripting)
LIBRARY_NAME, LIBRARY = _library(ALL_SCRIPTS)
