-- ARGV 12 the cursor: events with a later timestamp.
if not live(ID) then return {'unknown_task'} end
local reply = ok_snapshot(ID)
local calls = calls_key(ID)
local found = redis.call('ZRANGEBYSCORE', order_key(ID), '(' .. ARGV[12], '+inf', 'WITHSCORES')
for i = 1, #found, 2 do
  reply[#reply + 1] = redis.call('HGET', calls, 'e:' .. found[i])
  reply[#reply + 1] = found[i + 1]
end
return reply
