-- ARGV 12 event id: its call stops waiting, if it still waits.
if live(ID) and redis.call('HGET', calls_key(ID), 'c:' .. ARGV[12]) == 'p' then
  redis.call('HSET', calls_key(ID), 'c:' .. ARGV[12], 'x')
  redis.call('PUBLISH', CHANGED, ID)
end
return {'ok'}
