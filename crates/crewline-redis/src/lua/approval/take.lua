-- ARGV 6 whether the caller stops waiting ('1'): takes the call's decision, if it has one.
local state = redis.call('HGET', call_key(ID), 'state')
if not state then return {'gone'} end
if state == 'd' then return take(ID) end
-- Still parked: a decision given from now on is kept for the same call's retry.
if ARGV[6] == '1' then redis.call('HSET', call_key(ID), 'waiting_until', 0) end
return {'pending'}
