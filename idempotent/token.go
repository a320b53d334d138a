package idempotent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// tokenPrefix marks an Idempotency-Key that is a one-time token issued by the server (I7).
// Keys without it are client-generated (Stripe style) and skip the token layer.
const tokenPrefix = "tok_"

// IsToken reports whether key is a server-issued one-time token.
func IsToken(key string) bool { return strings.HasPrefix(key, tokenPrefix) }

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

// IssueToken creates a one-time token bound to scope (the user) that lives for ttl.
func (g *Guard) IssueToken(ctx context.Context, scope string) (token string, expiresAt time.Time, err error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", time.Time{}, err
	}
	token = tokenPrefix + hex.EncodeToString(b[:])
	expiresAt = time.Now().UTC().Add(g.cfg.TokenTTL).Truncate(time.Second)
	if err := g.rdb.Set(ctx, g.tokenKey(token), scope, g.cfg.TokenTTL).Err(); err != nil {
		return "", time.Time{}, err
	}
	return token, expiresAt, nil
}

func (g *Guard) consumeToken(ctx context.Context, scope, token string) (tokenState, error) {
	n, err := consumeScript.Run(ctx, g.rdb, []string{g.tokenKey(token)}, scope).Int()
	if err != nil {
		return tokenInvalid, err
	}
	return tokenState(n), nil
}

// checkToken is layer 1 (I7): a tok_ key must be a live token of the request's scope. done
// reports that the attempt is answered here.
func (g *Guard) checkToken(ctx context.Context, req Request) (res Result, err error, done bool) {
	state, terr := g.consumeToken(ctx, req.Key.Scope, req.Key.BizKey)
	switch {
	case terr != nil:
		if err := g.redisFailed(LayerToken, terr); err != nil {
			return Result{Outcome: Unavailable, Layer: LayerToken}, err, true
		}
	case state == tokenInvalid:
		// A token used long ago may have expired while its record remains.
		if res, found, err := g.fromRecord(ctx, req); found || err != nil {
			return res, err, true
		}
		return Result{Outcome: TokenInvalid, Layer: LayerToken}, ErrTokenInvalid, true
	}
	return Result{}, nil, false
}
