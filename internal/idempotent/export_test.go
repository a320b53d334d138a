package idempotent

// CacheKey exposes the replay-cache key of k, so that tests can check what Purge drops.
var CacheKey = cacheKey

// MarkerKey exposes the consumer marker key of k.
var MarkerKey = markerKey

// TokenKey exposes the Redis key of a one-time token, so that tests can expire it.
var TokenKey = tokenKey
