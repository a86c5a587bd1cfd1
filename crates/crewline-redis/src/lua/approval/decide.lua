-- ARGV 6 the decision JSON.
sweep()
local key = call_key(ID)
if redis.call('HGET', key, 'state') ~= 'p' then return {'unknown_call'} end
redis.call('HSET', key, 'state', 'd', 'decision', ARGV[6])
redis.call('ZREM', PARKED, ID)
fit(PARKED)
-- Kept for the waiting caller, or for the same call's retry, for the ttl from now.
expire_at(ID, redis.call('HGET', key, 'binding'), NOW + TTL)
redis.call('PUBLISH', CHANGED, 'approval:' .. ID)
return {'ok'}
