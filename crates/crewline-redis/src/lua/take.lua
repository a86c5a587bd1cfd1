-- ARGV 12 event id: takes its answer, if there is one yet.
if not live(ID) then return {'unknown_task'} end
local calls, event = calls_key(ID), ARGV[12]
local state = redis.call('HGET', calls, 'c:' .. event)
if not state then return {'unknown_event'} end
if state == 'p' then return {'pending'} end
if state == 'x' then return {'not_waiting'} end
local answer = redis.call('HGET', calls, 'a:' .. event)
if not answer then return {'already_answered'} end
local size = tonumber(redis.call('HGET', calls, 'n:' .. event) or 0)
redis.call('HDEL', calls, 'a:' .. event, 'n:' .. event)
charge(ID, redis.call('HGET', task_key(ID), 'owner'), -size)
return {'ok', answer}
