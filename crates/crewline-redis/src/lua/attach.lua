-- ARGV 12 the call attaching (its platform call id; '' for none), 13 the attachment's token
-- ('' for an attach without a lease), 14 the lease (ms).
if not live(ID) then return {'unknown_task'} end
local key = task_key(ID)
local status = redis.call('HGET', key, 'status')
local call, token, lease = ARGV[12] or '', ARGV[13] or '', tonumber(ARGV[14] or 0)
if status == 'running' then
  -- The same call again (a reconnect), or any call once the holder's lease lapsed (its
  -- replica died): re-attached. Anyone else waits for the lease.
  local until_ = tonumber(redis.call('HGET', key, 'lease_until') or 0)
  local lapsed = until_ > 0 and until_ <= NOW
  local same = call ~= '' and redis.call('HGET', key, 'call') == call
  if token == '' or not (same or lapsed) then return {'already_attached'} end
  settle_pending(ID)
elseif status ~= 'waiting' then
  return {'finished', status}
end
redis.call('HSET', key, 'status', 'running')
if token ~= '' then
  redis.call('HSET', key, 'call', call, 'token', token, 'lease_until', NOW + lease)
  set_deadline(ID, leased_deadline(ID, NOW + lease))
else
  redis.call('HDEL', key, 'call', 'token', 'lease_until')
  set_deadline(ID, tonumber(redis.call('HGET', key, 'created')) + MAX_AGE)
end
local reply = ok_snapshot(ID)
redis.call('PUBLISH', CHANGED, ID)
return reply
