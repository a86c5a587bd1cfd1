-- Writes the outcome of the claim held (or last held, if its lapse was seen) by ARGV 5 (its
-- token) and releases it, in one step. ARGV 6 the outcome's JSON, 7 ok (1/0), 8 received
-- (1/0). 1, or 0 when another caller holds the key or it is gone (nothing written).
local state, token = unpack(redis.call('HMGET', KEY, 'state', 'token'))
if (state ~= 'r' and state ~= 'u') or token ~= ARGV[5] then return 0 end
redis.call('HSET', KEY, 'state', 'd', 'outcome', ARGV[6], 'ok', ARGV[7], 'received', ARGV[8],
  'at', NOW)
redis.call('HDEL', KEY, 'lease_until')
redis.call('PEXPIRE', KEY, WINDOW)
wake()
return 1
