-- ARGV 6 the caller's step, 7 its token: 'wait' takes the call's decision if it has one;
-- 'stop' (the wait ran out) takes it, or leaves the call parked without a waiter; 'leave' (the
-- caller is gone) only leaves it without a waiter, its decision kept for the same call's retry.
-- A caller another one took the call over from (a reconnect) takes nothing and changes nothing.
local state = redis.call('HGET', call_key(ID), 'state')
if not state then return {'gone'} end
local step = ARGV[6]
if redis.call('HGET', call_key(ID), 'waiter') ~= ARGV[7] then return {'gone'} end
if state == 'd' and step ~= 'leave' then return take(ID) end
-- A decision given from now on (or already given, for 'leave') is kept for the retry.
if step ~= 'wait' then redis.call('HSET', call_key(ID), 'waiting_until', 0) end
return {'pending'}
