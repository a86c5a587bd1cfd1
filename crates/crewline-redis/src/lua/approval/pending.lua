-- The parked calls' requests, oldest first.
sweep()
local requests = {'ok'}
for _, id in ipairs(redis.call('ZRANGE', PARKED, 0, -1)) do
  local request = redis.call('HGET', call_key(id), 'request')
  if request then table.insert(requests, request) end
end
return requests
