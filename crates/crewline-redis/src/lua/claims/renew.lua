-- Extends the lease of the claim held by ARGV 5 (its token): 1, or 0 when it is not held by
-- it any more (its lapse was seen, or it was retaken).
local state, token = unpack(redis.call('HMGET', KEY, 'state', 'token'))
if state ~= 'r' or token ~= ARGV[5] then return 0 end
redis.call('HSET', KEY, 'lease_until', NOW + LEASE)
redis.call('PEXPIRE', KEY, LEASE + WINDOW)
return 1
