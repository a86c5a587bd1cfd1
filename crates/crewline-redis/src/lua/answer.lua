-- ARGV 12 event id, 13 answer JSON, 14 its bytes.
if not live(ID) then return {'unknown_task'} end
local calls, event = calls_key(ID), ARGV[12]
local state = redis.call('HGET', calls, 'c:' .. event)
if not state then
  if redis.call('HEXISTS', calls, 'e:' .. event) == 1 then return {'not_a_tool_call'} end
  return {'unknown_event'}
end
if state == 'a' then return {'already_answered'} end
if state == 'x' then return {'not_waiting'} end
-- The answer is held until its waiter takes it: it counts.
local size = tonumber(ARGV[14])
local refusal = reserve(ID, redis.call('HGET', task_key(ID), 'owner'), size)
if refusal then return {refusal} end
redis.call('HSET', calls, 'c:' .. event, 'a', 'a:' .. event, ARGV[13], 'n:' .. event, size)
redis.call('PUBLISH', CHANGED, ID)
return {'ok'}
