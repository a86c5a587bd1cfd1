-- ARGV 12 the cursor: events with a later timestamp (tool calls among them marked handed out).
if not live(ID) then return {'unknown_task'} end
local reply = ok_snapshot(ID)
local calls = calls_key(ID)
local found = redis.call('ZRANGEBYSCORE', order_key(ID), '(' .. ARGV[12], '+inf', 'WITHSCORES')
for i = 1, #found, 2 do
  reply[#reply + 1] = redis.call('HGET', calls, 'e:' .. found[i])
  reply[#reply + 1] = found[i + 1]
  -- Handed to a client, which may run it: a withdraw can no longer say it was not run.
  if redis.call('HEXISTS', calls, 'c:' .. found[i]) == 1 then
    redis.call('HSET', calls, 'h:' .. found[i], 1)
  end
end
return reply
