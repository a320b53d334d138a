package idempotent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Redis keys of one idempotency key share the hash tag {scope:biz_type:biz_key}, so that
// they live in one Redis Cluster slot and one Lua script may touch them together. Every script
// receives all the keys it touches as KEYS (a key built inside Lua could not be routed by a
// cluster), and no command names the keys of two idempotency keys (see Guard.forget).
func (g *Guard) redisKey(k Key, suffix string) string {
	return g.cfg.KeyPrefix + "idem:{" + k.String() + "}:" + suffix
}

func (g *Guard) cacheKey(k Key) string  { return g.redisKey(k, "resp") }
func (g *Guard) leaseKey(k Key) string  { return g.redisKey(k, "lock") }
func (g *Guard) markerKey(k Key) string { return g.redisKey(k, "msg") }
func (g *Guard) logKey(k Key) string    { return g.redisKey(k, "log") }
func (g *Guard) tokenKey(token string) string {
	return g.cfg.KeyPrefix + "idem:token:" + token
}

// cached is a finished outcome in the replay cache.
type cached struct {
	Fingerprint string
	Response    Response
}

// encode writes c in the cache's compact form — the fingerprint, the status, the headers one
// "Name: value" a line, an empty line, then the body as it is — so that a replay costs no JSON
// and no base64: it is the hot path of every duplicate.
func (c *cached) encode() []byte {
	var b bytes.Buffer
	b.Grow(len(c.Fingerprint) + len(c.Response.Body) + 64)
	b.WriteString(c.Fingerprint)
	b.WriteByte('\n')
	b.WriteString(strconv.Itoa(c.Response.Status))
	b.WriteByte('\n')
	for k, v := range c.Response.Header {
		b.WriteString(k)
		b.WriteString(": ")
		b.WriteString(v)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.Write(c.Response.Body)
	return b.Bytes()
}

// decodeCached reads what encode wrote; ok is false for anything else.
func decodeCached(raw []byte) (c cached, ok bool) {
	line := func() (string, bool) {
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			return "", false
		}
		l := string(raw[:i])
		raw = raw[i+1:]
		return l, true
	}
	var status string
	if c.Fingerprint, ok = line(); !ok {
		return cached{}, false
	}
	if status, ok = line(); !ok {
		return cached{}, false
	}
	n, err := strconv.Atoi(status)
	if err != nil {
		return cached{}, false
	}
	c.Response.Status = n
	for {
		h, ok := line()
		if !ok {
			return cached{}, false
		}
		if h == "" {
			break
		}
		name, value, found := strings.Cut(h, ": ")
		if !found {
			return cached{}, false
		}
		if c.Response.Header == nil {
			c.Response.Header = map[string]string{}
		}
		c.Response.Header[name] = value
	}
	c.Response.Body = bytes.Clone(raw)
	return c, true
}

// claimScript is layers 2 and 3 in one round trip: the cached outcome if there is one,
// otherwise the lease taken with SET NX PX and a random owner (ARGV[1]); ARGV[3] = "0" skips
// the lease (NoLock), ARGV[4] = "0" skips the cache (NoCache). The attempt is logged by the
// guard afterwards, off the request's path (attemptLog).
// Answers: {1, outcome} cached, {2} lease taken, {3} lease busy, {0} neither asked.
var claimScript = redis.NewScript(`
if ARGV[4] == '1' then
  local v = redis.call('GET', KEYS[1])
  if v then return {1, v} end
end
if ARGV[3] == '1' then
  if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {2} end
  return {3}
end
return {0}
`)

// releaseScript fills the cache with a committed outcome (ARGV[2], unless empty, for ARGV[3]
// ms) and deletes the lease only if it is still ours (compare-and-delete).
var releaseScript = redis.NewScript(`
if ARGV[2] ~= '' then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then return redis.call('DEL', KEYS[2]) end
return 0
`)

// renewScript extends the lease only if it is still ours.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`)

// claim runs layers 2 and 3: it returns the cached outcome of k, or the lease of k (nil when
// the lock layer is off), or errLockBusy.
func (g *Guard) claim(ctx context.Context, req Request) (*lease, *cached, error) {
	k := req.Key
	if g.rdb == nil || (g.cfg.Lab.NoLock && g.cfg.Lab.NoCache) {
		return nil, nil, nil
	}
	if g.cfg.Lab.RedsyncLock {
		return g.claimRedsync(ctx, k)
	}
	owner := randomToken()
	reply, err := claimScript.Run(ctx, g.rdb, []string{g.cacheKey(k), g.leaseKey(k)},
		owner, g.cfg.LockTTL.Milliseconds(), flag(!g.cfg.Lab.NoLock), flag(!g.cfg.Lab.NoCache)).Slice()
	if err != nil {
		return nil, nil, errors.Join(errRedisDown, err)
	}
	code, _ := reply[0].(int64)
	switch code {
	case 1:
		raw, _ := reply[1].(string)
		c, ok := decodeCached([]byte(raw))
		if !ok {
			return nil, nil, nil // unreadable: let the dedup record answer
		}
		return nil, &c, nil
	case 2:
		return g.newLease(ctx, k, owner), nil, nil
	case 3:
		return nil, nil, errLockBusy
	}
	return nil, nil, nil
}

// claimRedsync is claim with a cache read and a redsync mutex: two round trips instead of
// one, kept to compare the two in the bench.
func (g *Guard) claimRedsync(ctx context.Context, k Key) (*lease, *cached, error) {
	if !g.cfg.Lab.NoCache {
		raw, err := g.rdb.Get(ctx, g.cacheKey(k)).Bytes()
		switch {
		case err == nil:
			if c, ok := decodeCached(raw); ok {
				return nil, &c, nil
			}
		case !errors.Is(err, redis.Nil):
			return nil, nil, errors.Join(errRedisDown, err)
		}
	}
	if g.cfg.Lab.NoLock {
		return nil, nil, nil
	}
	l, err := g.lockRedsync(ctx, g.leaseKey(k), k)
	return l, nil, err
}

// cachePut stores a committed outcome for CacheTTL; failures are only counted, never fatal.
func (g *Guard) cachePut(ctx context.Context, k Key, c *cached) {
	if g.rdb == nil {
		return
	}
	if err := g.rdb.Set(ctx, g.cacheKey(k), c.encode(), g.cfg.CacheTTL).Err(); err != nil {
		g.metrics.redisErrors.WithLabelValues(layerCache).Inc()
	}
}

// errRedisDown marks a Redis failure that the layer could not step around.
var errRedisDown = errors.New("redis unavailable")

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
