-- What every script of the Redis task store starts with: its arguments, the server's clock,
-- the key layout, and the bookkeeping every update shares. Concatenated before each script.
--
-- ARGV: 1 prefix, 2..10 the limits, 11 the task id, 12.. the script's own.
local P = ARGV[1]
local MAX_TASKS = tonumber(ARGV[2])
local MAX_PER_OWNER = tonumber(ARGV[3])
local MAX_TASK_BYTES = tonumber(ARGV[4])
local MAX_OWNER_BYTES = tonumber(ARGV[5])
local MAX_TOTAL_BYTES = tonumber(ARGV[6])
local MAX_EVENTS = math.max(tonumber(ARGV[7]), 1)
local WAITING_TTL = tonumber(ARGV[8])
local MAX_AGE = tonumber(ARGV[9])
local LINGER = tonumber(ARGV[10])
local ID = ARGV[11]

-- The server's clock, so every replica ages tasks and stamps events by the same one.
local clock = redis.call('TIME')
local NOW = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local EXPIRY = P .. 'expiry'            -- zset: task id -> when it expires (ms)
local OWNER = P .. 'owner'              -- hash: task id -> owner
local BYTES = P .. 'bytes'              -- hash: task id -> bytes it holds
local TOTAL = P .. 'total'              -- string: bytes all tasks hold
local OWNER_BYTES = P .. 'owner_bytes'  -- hash: owner -> bytes its tasks hold
local OWNER_TASKS = P .. 'owner_tasks'  -- hash: owner -> tasks it holds
local CHANGED = P .. 'changed'          -- channel: the id of a task that changed

local function task_key(id) return P .. 'task:' .. id end
-- hash: e:<event> its JSON, s:<event> its bytes, c:<event> its call's state (p pending,
-- a answered, x abandoned), a:<event> the answer not yet taken, n:<event> that answer's bytes,
-- h:<event> set once a poll handed the call out (its client may have run it)
local function calls_key(id) return P .. 'calls:' .. id end
local function order_key(id) return P .. 'order:' .. id end   -- zset: event -> timestamp
local function done_key(owner) return P .. 'done:' .. owner end  -- zset: finished task -> when

-- Sets the books to expire with the last task to expire (or clears them when no task is
-- left), so they never outlive the tasks they count, even when no replica is left to sweep.
local function fit_books()
  local last = redis.call('ZRANGE', EXPIRY, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', OWNER, BYTES, TOTAL, OWNER_BYTES, OWNER_TASKS)
    return
  end
  for _, key in ipairs({EXPIRY, OWNER, BYTES, TOTAL, OWNER_BYTES, OWNER_TASKS}) do
    redis.call('PEXPIREAT', key, last[2])
  end
end

local function charge(id, owner, n)
  redis.call('HINCRBY', BYTES, id, n)
  redis.call('HINCRBY', OWNER_BYTES, owner, n)
  redis.call('INCRBY', TOTAL, n)
end

-- Removes a task and gives back what it held.
local function forget(id)
  local owner = redis.call('HGET', OWNER, id)
  local bytes = tonumber(redis.call('HGET', BYTES, id) or 0)
  redis.call('ZREM', EXPIRY, id)
  redis.call('HDEL', OWNER, id)
  redis.call('HDEL', BYTES, id)
  if bytes ~= 0 then redis.call('DECRBY', TOTAL, bytes) end
  if owner then
    local left = redis.call('HINCRBY', OWNER_TASKS, owner, -1)
    if left <= 0 then
      redis.call('HDEL', OWNER_TASKS, owner)
      redis.call('HDEL', OWNER_BYTES, owner)
    elseif bytes ~= 0 then
      redis.call('HINCRBY', OWNER_BYTES, owner, -bytes)
    end
    redis.call('ZREM', done_key(owner), id)
  end
  redis.call('DEL', task_key(id), calls_key(id), order_key(id))
  redis.call('PUBLISH', CHANGED, id)
end

-- Forgets every expired task: counts and bytes never include what expired.
local function sweep()
  local swept = false
  while true do
    local ids = redis.call('ZRANGEBYSCORE', EXPIRY, '-inf', NOW, 'LIMIT', 0, 128)
    if #ids == 0 then break end
    for _, id in ipairs(ids) do forget(id) end
    swept = true
  end
  if swept then fit_books() end
end

-- Drops `owner`'s oldest finished task other than `except` (it only lingers to be read);
-- whether there was one.
local function evict_finished(owner, except)
  for _, id in ipairs(redis.call('ZRANGE', done_key(owner), 0, 1)) do
    if id ~= except then
      forget(id)
      fit_books()
      return true
    end
  end
  return false
end

local function try_reserve(id, owner, add)
  if tonumber(redis.call('HGET', BYTES, id) or 0) + add > MAX_TASK_BYTES then
    return 'task_budget'
  end
  if tonumber(redis.call('HGET', OWNER_BYTES, owner) or 0) + add > MAX_OWNER_BYTES then
    return 'owner_budget'
  end
  if tonumber(redis.call('GET', TOTAL) or 0) + add > MAX_TOTAL_BYTES then
    return 'full_bytes'
  end
  charge(id, owner, add)
  return false
end

-- Charges `add` bytes to task `id` of `owner` if every budget allows it (over the caller's
-- own, its oldest finished task makes room first); the refusal, or false.
local function reserve(id, owner, add)
  local refusal = try_reserve(id, owner, add)
  if refusal == 'owner_budget' and evict_finished(owner, id) then
    refusal = try_reserve(id, owner, add)
  end
  return refusal
end

-- Sets when task `id` expires, on its keys and in the books.
local function set_deadline(id, at)
  if at <= NOW then at = NOW + 1 end
  redis.call('HSET', task_key(id), 'dead_at', at)
  redis.call('ZADD', EXPIRY, at, id)
  for _, key in ipairs({task_key(id), calls_key(id), order_key(id)}) do
    redis.call('PEXPIREAT', key, at)
  end
  fit_books()
end

local function live(id)
  return redis.call('EXISTS', task_key(id)) == 1
end

local function snapshot(id)
  return redis.call('HMGET', task_key(id), 'owner', 'status', 'task', 'tools', 'output')
end

local function ok_snapshot(id)
  local s = snapshot(id)
  return {'ok', s[1], s[2], s[3], s[4], s[5]}
end

local function is_finished(status)
  return status ~= 'waiting' and status ~= 'running'
end

-- Settles the calls a task's previous attachment left waiting (its replica died, or its call
-- reconnected): one no poll handed out is removed (no client will ever run it); one handed
-- out is abandoned (it may have run; a late answer is refused).
local function settle_pending(id)
  local calls, order = calls_key(id), order_key(id)
  local owner = redis.call('HGET', task_key(id), 'owner')
  local fields = redis.call('HGETALL', calls)
  for i = 1, #fields, 2 do
    if fields[i + 1] == 'p' and string.sub(fields[i], 1, 2) == 'c:' then
      local event = string.sub(fields[i], 3)
      if redis.call('HEXISTS', calls, 'h:' .. event) == 1 then
        redis.call('HSET', calls, fields[i], 'x')
      else
        local freed = tonumber(redis.call('HGET', calls, 's:' .. event) or 0)
        redis.call('HDEL', calls, 'e:' .. event, 's:' .. event, 'c:' .. event)
        redis.call('ZREM', order, event)
        if freed ~= 0 then charge(id, owner, -freed) end
      end
    end
  end
end

-- When a task attached under a lease expires: at its age limit, or `WAITING_TTL` after its
-- lease lapses (a task whose replica died is not kept for hours).
local function leased_deadline(id, lease_until)
  local created = tonumber(redis.call('HGET', task_key(id), 'created'))
  return math.min(created + MAX_AGE, lease_until + WAITING_TTL)
end

sweep()
