-- ARGV 12 event id: ends its call for a caller that stops waiting, saying whether a poll
-- handed it out (its client may have run it) or not (removed, so no client ever will).
if not live(ID) then return {'unknown_task'} end
local calls, event = calls_key(ID), ARGV[12]
local state = redis.call('HGET', calls, 'c:' .. event)
if not state then
  if redis.call('HEXISTS', calls, 'e:' .. event) == 1 then return {'not_a_tool_call'} end
  return {'unknown_event'}
end
local owner = redis.call('HGET', task_key(ID), 'owner')
if state == 'a' then
  local answer = redis.call('HGET', calls, 'a:' .. event)
  if not answer then return {'already_answered'} end
  local size = tonumber(redis.call('HGET', calls, 'n:' .. event) or 0)
  redis.call('HDEL', calls, 'a:' .. event, 'n:' .. event)
  charge(ID, owner, -size)
  return {'ok', 'answered', answer}
end
if redis.call('HEXISTS', calls, 'h:' .. event) == 1 then
  if state == 'p' then redis.call('HSET', calls, 'c:' .. event, 'x') end
  redis.call('PUBLISH', CHANGED, ID)
  return {'ok', 'handed_out'}
end
local freed = tonumber(redis.call('HGET', calls, 's:' .. event) or 0)
redis.call('HDEL', calls, 'e:' .. event, 's:' .. event, 'c:' .. event)
redis.call('ZREM', order_key(ID), event)
if freed ~= 0 then charge(ID, owner, -freed) end
redis.call('PUBLISH', CHANGED, ID)
return {'ok', 'never'}
