return {'ok', tostring(redis.call('ZCARD', EXPIRY)), tostring(redis.call('GET', TOTAL) or 0)}
