package idempotent

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/redis/go-redis/v9"
)

// cached is a finished outcome in the replay cache.
type cached struct {
	Fingerprint string   `json:"fp"`
	Response    Response `json:"r"`
}

func cacheKey(k Key) string { return "oncepay:idem:resp:" + k.String() }

// cacheGet returns the cached outcome of k, if any. The database stays the source of truth:
// a miss only means the next layer answers.
func (g *Guard) cacheGet(ctx context.Context, k Key) (cached, bool, error) {
	raw, err := g.rdb.Get(ctx, cacheKey(k)).Bytes()
	if errors.Is(err, redis.Nil) {
		return cached{}, false, nil
	}
	if err != nil {
		return cached{}, false, err
	}
	var c cached
	if err := json.Unmarshal(raw, &c); err != nil {
		return cached{}, false, nil
	}
	return c, true, nil
}

// cachePut stores a committed outcome for CacheTTL; failures are only counted, never fatal.
func (g *Guard) cachePut(ctx context.Context, k Key, fingerprint string, resp Response) {
	raw, _ := json.Marshal(cached{Fingerprint: fingerprint, Response: resp})
	if err := g.rdb.Set(ctx, cacheKey(k), raw, g.cfg.CacheTTL).Err(); err != nil {
		g.metrics.redisErrors.WithLabelValues(string(LayerCache)).Inc()
	}
}
