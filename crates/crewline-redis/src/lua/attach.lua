if not live(ID) then return {'unknown_task'} end
local key = task_key(ID)
local status = redis.call('HGET', key, 'status')
if status == 'running' then return {'already_attached'} end
if status ~= 'waiting' then return {'finished', status} end
redis.call('HSET', key, 'status', 'running')
local reply = ok_snapshot(ID)
set_deadline(ID, tonumber(redis.call('HGET', key, 'created')) + MAX_AGE)
redis.call('PUBLISH', CHANGED, ID)
return reply
