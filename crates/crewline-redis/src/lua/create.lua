-- ARGV 12 owner, 13 task JSON, 14 tools JSON, 15 bytes, 16.. the tools' names.
local owner, size = ARGV[12], tonumber(ARGV[15])
local function held() return tonumber(redis.call('HGET', OWNER_TASKS, owner) or 0) end
while held() >= MAX_PER_OWNER do
  if not evict_finished(owner, false) then return {'too_many_tasks'} end
end
if redis.call('ZCARD', EXPIRY) >= MAX_TASKS then return {'full'} end
local refusal = reserve(ID, owner, size)
if refusal then return {refusal} end
local key = task_key(ID)
redis.call('HSET', key, 'owner', owner, 'status', 'waiting', 'task', ARGV[13],
  'tools', ARGV[14], 'created', NOW, 'last_ts', 0)
for i = 16, #ARGV do redis.call('HSET', key, 'tool:' .. ARGV[i], 1) end
redis.call('HSET', OWNER, ID, owner)
redis.call('HINCRBY', OWNER_TASKS, owner, 1)
set_deadline(ID, NOW + WAITING_TTL)
return {'ok'}
