package idempotent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// TokenPrefix marks an Idempotency-Key that is a one-time token issued by the server (I7).
// Keys without it are client-generated (Stripe style) and skip the token layer.
const TokenPrefix = "tok_"

// IsToken reports whether key is a server-issued one-time token.
func IsToken(key string) bool { return strings.HasPrefix(key, TokenPrefix) }

// tokenState is what consuming a token found.
type tokenState int

const (
	tokenInvalid tokenState = iota // missing, expired, or issued to someone else
	tokenFresh                     // live and unused: now marked used
	tokenUsed                      // used before: a duplicate of that request
)

// consumeScript consumes a token atomically (I7): a live token of this scope is marked used
// and keeps its TTL; a used one is reported as such; anything else is invalid. One script, so
// two copies of a double click cannot both see it unused.
var consumeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v == ARGV[1] then
  redis.call('SET', KEYS[1], 'used:' .. ARGV[1], 'KEEPTTL')
  return 1
end
if v == 'used:' .. ARGV[1] then return 2 end
return 0
`)

func tokenKey(token string) string { return "oncepay:idem:token:" + token }

// IssueToken creates a one-time token bound to scope (the user) that lives for ttl.
func (g *Guard) IssueToken(ctx context.Context, scope string) (token string, expiresAt time.Time, err error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", time.Time{}, err
	}
	token = TokenPrefix + hex.EncodeToString(b[:])
	expiresAt = time.Now().UTC().Add(g.cfg.TokenTTL).Truncate(time.Second)
	if err := g.rdb.Set(ctx, tokenKey(token), scope, g.cfg.TokenTTL).Err(); err != nil {
		return "", time.Time{}, err
	}
	return token, expiresAt, nil
}

func (g *Guard) consumeToken(ctx context.Context, scope, token string) (tokenState, error) {
	n, err := consumeScript.Run(ctx, g.rdb, []string{tokenKey(token)}, scope).Int()
	if err != nil {
		return tokenInvalid, err
	}
	return tokenState(n), nil
}
