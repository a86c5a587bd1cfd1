-- ARGV 6 binding, 7 request JSON, 8 whether the caller waits ('1'), 9 the caller's token (its
-- request's own id).
sweep()
local binding, waits, token = ARGV[6], ARGV[8] == '1', ARGV[9]
local same = binding_key(binding)
if redis.call('ZREMRANGEBYSCORE', same, '-inf', NOW) > 0 then fit(same) end
local ids = redis.call('ZRANGE', same, 0, -1)
-- A decision on the same call (same call scope, tool and arguments): collected, once, by
-- whoever asks now, even while an earlier caller still seems to wait on it: that caller may
-- be a socket the call reconnected from, or a replica that died.
for _, id in ipairs(ids) do
  if redis.call('HGET', call_key(id), 'state') == 'd' then
    return take(id)
  end
end
-- The same call already parked: it keeps its id, so the question the caller heard still names
-- it; it is never parked twice. The newest caller waits on it (an earlier one no longer).
for _, id in ipairs(ids) do
  if redis.call('HGET', call_key(id), 'state') == 'p' then
    local until_ = 0
    if waits then until_ = NOW + WAIT end
    redis.call('HSET', call_key(id), 'waiting_until', until_, 'waiter', token)
    redis.call('PUBLISH', CHANGED, 'approval:' .. id)
    return {'parked', id}
  end
end
-- Ids are minted per request; a repeated one never replaces the call parked under it.
if redis.call('EXISTS', call_key(ID)) == 1 then return {'reused'} end
if redis.call('ZCARD', PARKED) >= MAX_PARKED then return {'full'} end
local at = NOW + TTL
local until_ = 0
if waits then until_ = NOW + WAIT end
redis.call('HSET', call_key(ID), 'request', ARGV[7], 'binding', binding, 'state', 'p',
  'waiting_until', until_, 'waiter', token)
redis.call('ZADD', PARKED, at, ID)
fit(PARKED)
expire_at(ID, binding, at)
return {'parked', ID}
