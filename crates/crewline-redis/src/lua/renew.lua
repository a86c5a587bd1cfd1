-- ARGV 12 the attachment's token, 13 the lease (ms): extends the lease while it is this
-- attachment's.
if not live(ID) then return {'unknown_task'} end
local key = task_key(ID)
local status = redis.call('HGET', key, 'status')
if is_finished(status) then return {'finished', status} end
if status ~= 'running' or redis.call('HGET', key, 'token') ~= ARGV[12] then
  return {'already_attached'}
end
local until_ = NOW + tonumber(ARGV[13])
redis.call('HSET', key, 'lease_until', until_)
set_deadline(ID, leased_deadline(ID, until_))
return {'ok'}
