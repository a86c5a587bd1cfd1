-- What every script of the Redis claim store starts with: its arguments, the server's clock
-- and the key of the claim. Concatenated before each script.
--
-- ARGV: 1 prefix, 2 the claim's key (64 hex digits), 3 lease (ms), 4 retry window (ms),
-- 5.. the script's own.
--
-- One hash per claim, `{prefix}claim:{key}`: state (r running, d done, u unknown), token (its
-- holder's, or its last holder's), idk (the call's idempotency key), lease_until (ms),
-- outcome (its JSON), ok (1 a success, 0 a failure), received (1 once a caller has it),
-- at (ms: when it finished). It expires: lease + window after the last renewal while
-- running, window after it finished or became unknown.
local ID = ARGV[2]
local KEY = ARGV[1] .. 'claim:' .. ID
local LEASE = math.max(tonumber(ARGV[3]), 1)
local WINDOW = math.max(tonumber(ARGV[4]), 1)
local CHANGED = ARGV[1] .. 'changed' -- the store's wake-up channel, shared: 'claim:<key>'

-- The server's clock, so every replica ages leases by the same one.
local clock = redis.call('TIME')
local NOW = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function wake()
  redis.call('PUBLISH', CHANGED, 'claim:' .. ID)
end

-- A running claim whose lease lapsed (its owner stopped renewing: a dead replica) becomes an
-- unknown outcome, kept for the window.
local function lapse()
  local state, lease_until = unpack(redis.call('HMGET', KEY, 'state', 'lease_until'))
  if state == 'r' and tonumber(lease_until) <= NOW then
    redis.call('HSET', KEY, 'state', 'u')
    redis.call('PEXPIRE', KEY, WINDOW)
    wake()
  end
end

-- Holds the claim for `token`, its lease starting now.
local function run(token)
  redis.call('HSET', KEY, 'state', 'r', 'token', token, 'lease_until', NOW + LEASE)
  redis.call('PEXPIRE', KEY, LEASE + WINDOW)
end
