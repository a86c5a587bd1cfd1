-- Claims the key, or reads what holds it. ARGV 5 mode: 'join' (read only), 'claim', 'retake'
-- (claim, taking over an unknown outcome), 'wait' (a joiner's read: an outcome as is);
-- 6 the caller's token, 7 its fresh idempotency key (both empty for 'join' and 'wait').
-- Replies {'absent'}, {'won', idk}, {'running', idk, lease left (ms)}, {'unknown', idk},
-- {'outcome', idk, outcome}, {'done', idk, outcome, age (ms)}.
local MODE = ARGV[5]
lapse()
local state, idk, outcome, ok, received, at, lease_until = unpack(redis.call('HMGET', KEY,
  'state', 'idk', 'outcome', 'ok', 'received', 'at', 'lease_until'))
-- A received failure: a new identical call is a new request.
if state == 'd' and received == '1' and ok ~= '1' and MODE ~= 'wait' then
  redis.call('DEL', KEY)
  state = false
end
if not state then
  if MODE == 'join' or MODE == 'wait' then return {'absent'} end
  redis.call('HSET', KEY, 'idk', ARGV[7], 'received', '0')
  run(ARGV[6])
  return {'won', ARGV[7]}
end
if state == 'r' then return {'running', idk, tostring(tonumber(lease_until) - NOW)} end
if state == 'u' then
  if MODE == 'retake' then
    run(ARGV[6])
    return {'won', idk}
  end
  return {'unknown', idk}
end
if received ~= '1' or MODE == 'wait' then
  redis.call('HSET', KEY, 'received', '1')
  return {'outcome', idk, outcome}
end
if ok == '1' then return {'done', idk, outcome, tostring(NOW - tonumber(at))} end
return {'absent'}
