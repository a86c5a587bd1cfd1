-- ARGV 12 status, 13 output JSON ('' for none), 14 its bytes, 15 the attachment's token
-- (optional: then only while the task is still that attachment's).
if not live(ID) then return {'unknown_task'} end
local key, calls = task_key(ID), calls_key(ID)
if ARGV[15] and ARGV[15] ~= '' and redis.call('HGET', key, 'token') ~= ARGV[15] then
  return {'released'}
end
local dropped = false
if not is_finished(redis.call('HGET', key, 'status')) then
  local owner = redis.call('HGET', key, 'owner')
  if ARGV[13] ~= '' then
    dropped = reserve(ID, owner, tonumber(ARGV[14]))
    if not dropped then redis.call('HSET', key, 'output', ARGV[13]) end
  end
  redis.call('HSET', key, 'status', ARGV[12], 'finished', NOW)
  local fields = redis.call('HGETALL', calls)
  for i = 1, #fields, 2 do
    if fields[i + 1] == 'p' and string.sub(fields[i], 1, 2) == 'c:' then
      redis.call('HSET', calls, fields[i], 'x')
    end
  end
  redis.call('ZADD', done_key(owner), NOW, ID)
  redis.call('PEXPIREAT', done_key(owner), NOW + LINGER)
  set_deadline(ID, NOW + LINGER)
  redis.call('PUBLISH', CHANGED, ID)
end
local reply = ok_snapshot(ID)
reply[7] = dropped
return reply
