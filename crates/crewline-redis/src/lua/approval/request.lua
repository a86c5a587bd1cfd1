-- ARGV 6 binding, 7 request JSON, 8 whether the caller waits ('1').
sweep()
local binding, waits = ARGV[6], ARGV[8] == '1'
local same = binding_key(binding)
if redis.call('ZREMRANGEBYSCORE', same, '-inf', NOW) > 0 then fit(same) end
local ids = redis.call('ZRANGE', same, 0, -1)
-- A decision given while nobody waited, for the same call: collected, once.
for _, id in ipairs(ids) do
  if redis.call('HGET', call_key(id), 'state') == 'd' and not waited(id) then
    return take(id)
  end
end
-- The same call already parked (the model asked again): it keeps its id, so the question the
-- caller heard still names it; it is never parked twice.
for _, id in ipairs(ids) do
  if redis.call('HGET', call_key(id), 'state') == 'p' and not waited(id) then
    if waits then redis.call('HSET', call_key(id), 'waiting_until', NOW + WAIT) end
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
  'waiting_until', until_)
redis.call('ZADD', PARKED, at, ID)
fit(PARKED)
expire_at(ID, binding, at)
return {'parked', ID}
