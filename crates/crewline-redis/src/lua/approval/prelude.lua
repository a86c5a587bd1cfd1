-- What every script of the Redis approver starts with: its arguments, the server's clock, the
-- key layout, and the bookkeeping every update shares. Concatenated before each script.
--
-- ARGV: 1 prefix, 2 ttl (ms), 3 max parked, 4 wait timeout (ms), 5 the request id, 6.. the
-- script's own.
local P = ARGV[1] .. 'approval:'
local TTL = math.max(tonumber(ARGV[2]), 1)
local MAX_PARKED = tonumber(ARGV[3])
local WAIT = tonumber(ARGV[4])
local ID = ARGV[5]

-- The server's clock, so every replica expires calls and decisions by the same one.
local clock = redis.call('TIME')
local NOW = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local PARKED = P .. 'parked'        -- zset: id of a call waiting for a decision -> its expiry (ms)
local CHANGED = ARGV[1] .. 'changed' -- the store's wake-up channel, shared: 'approval:<id>'

-- hash: request (its JSON), binding, state (p parked, d decided), decision (its JSON),
-- waiting_until (ms: a caller waits on it until then; 0 when none does), waiter (the token of
-- the caller that asked last: only it takes the decision while it waits)
local function call_key(id) return P .. 'call:' .. id end
-- zset: the ids of the calls (parked or decided) with one binding -> their expiry (ms)
local function binding_key(binding) return P .. 'binding:' .. binding end

-- Sets a sorted set to expire with its last member, or deletes it when it has none, so it
-- never outlives what it lists, even when no replica is left to sweep.
local function fit(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIREAT', key, last[2])
  end
end

-- Forgets parked calls whose time is up (their hashes expire on their own).
local function sweep()
  if redis.call('ZREMRANGEBYSCORE', PARKED, '-inf', NOW) > 0 then fit(PARKED) end
end

-- Sets when call `id` (of `binding`) is forgotten.
local function expire_at(id, binding, at)
  redis.call('PEXPIREAT', call_key(id), at)
  redis.call('ZADD', binding_key(binding), at, id)
  fit(binding_key(binding))
end

-- Whether a caller waits on call `id` now.
local function waited(id)
  return tonumber(redis.call('HGET', call_key(id), 'waiting_until') or 0) > NOW
end

-- Takes call `id`'s decision (it is used once): {'decided', decision}.
local function take(id)
  local key = call_key(id)
  local decision, binding = unpack(redis.call('HMGET', key, 'decision', 'binding'))
  redis.call('DEL', key)
  redis.call('ZREM', binding_key(binding), id)
  fit(binding_key(binding))
  return {'decided', decision}
end
