-- ARGV 12 tool name, 13 event id, 14 event JSON (without its timestamp), 15 its bytes.
if not live(ID) then return {'unknown_task'} end
local key, calls, order = task_key(ID), calls_key(ID), order_key(ID)
local status = redis.call('HGET', key, 'status')
if is_finished(status) then return {'finished', status} end
if redis.call('HEXISTS', key, 'tool:' .. ARGV[12]) == 0 then return {'unknown_tool'} end
local owner = redis.call('HGET', key, 'owner')
local event, size = ARGV[13], tonumber(ARGV[15])

-- Drops an event; a call that still waits keeps its state, the others go with it.
local function drop_event(id)
  local freed = tonumber(redis.call('HGET', calls, 's:' .. id) or 0)
  redis.call('HDEL', calls, 'e:' .. id, 's:' .. id)
  redis.call('ZREM', order, id)
  if redis.call('HGET', calls, 'c:' .. id) ~= 'p' then
    freed = freed + tonumber(redis.call('HGET', calls, 'n:' .. id) or 0)
    redis.call('HDEL', calls, 'c:' .. id, 'a:' .. id, 'n:' .. id, 'h:' .. id)
  end
  if freed ~= 0 then charge(ID, owner, -freed) end
end

while redis.call('ZCARD', order) >= MAX_EVENTS do
  drop_event(redis.call('ZRANGE', order, 0, 0)[1])
end
-- Over the task's budget, settled events (the oldest first) make room, as they would for
-- max_events; calls still waiting for an answer are never dropped.
local function over() return tonumber(redis.call('HGET', BYTES, ID) or 0) + size > MAX_TASK_BYTES end
if over() then
  for _, id in ipairs(redis.call('ZRANGE', order, 0, -1)) do
    if not over() then break end
    if redis.call('HGET', calls, 'c:' .. id) ~= 'p' then drop_event(id) end
  end
end
local refusal = reserve(ID, owner, size)
if refusal then return {refusal} end
-- Strictly increasing per task, so `event_t` = the last timestamp seen misses nothing.
local ts = math.max(NOW, tonumber(redis.call('HGET', key, 'last_ts')) + 1)
redis.call('HSET', key, 'last_ts', ts)
redis.call('HSET', calls, 'e:' .. event, ARGV[14], 's:' .. event, size, 'c:' .. event, 'p')
redis.call('ZADD', order, ts, event)
local at = tonumber(redis.call('HGET', key, 'dead_at'))
redis.call('PEXPIREAT', calls, at)
redis.call('PEXPIREAT', order, at)
redis.call('PUBLISH', CHANGED, ID)
return {'ok', string.format('%.0f', ts)}
