package idempotent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/idempotent/internal/opskit"
)

// tokenPrefix marks an Idempotency-Key that is a one-time token issued by the server (I7).
// Keys without it are client-generated (Stripe style) and skip the token layer.
const tokenPrefix = "tok_"

// isToken reports whether key is a server-issued one-time token.
func isToken(key string) bool { return strings.HasPrefix(key, tokenPrefix) }

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

// issueScript stores a token of scope ARGV[1] that expires ARGV[2] ms from now, rounded down
// to the second, by Redis's clock, and returns that expiry in Unix ms. The expiry a client is
// told is then the one Redis enforces, whatever the issuing instance's own clock says: an
// instance minutes behind once announced an expires_at minutes before the token's real end,
// and one ahead an expires_at past it. (TIME in a script needs effects replication, Redis's
// only mode since 7.0 and its default since 5.0.)
var issueScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = math.floor((now + tonumber(ARGV[2])) / 1000) * 1000
redis.call('SET', KEYS[1], ARGV[1], 'PX', math.max(1, exp - now))
return exp
`)

// IssueToken creates a one-time token bound to scope (the user) that lives for the token TTL.
// expiresAt is the end Redis keeps, on Redis's clock (issueScript), to the second.
func (g *Guard) IssueToken(ctx context.Context, scope string) (token string, expiresAt time.Time, err error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", time.Time{}, err
	}
	token = tokenPrefix + hex.EncodeToString(b[:])
	if g.rdb == nil {
		return "", time.Time{}, &Error{Code: ErrUnavailable.Code, Detail: "one-time tokens live in Redis, and this guard has none"}
	}
	exp, err := issueScript.Run(ctx, g.rdb, []string{g.tokenKey(token)}, scope, g.cfg.TokenTTL.Milliseconds()).Int64()
	if err != nil {
		return "", time.Time{}, err
	}
	return token, time.UnixMilli(exp).UTC(), nil
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
		if err := g.redisFailed(layerToken, terr); err != nil {
			return Result{Outcome: Unavailable, Layer: layerToken}, err, true
		}
		// Degrade: the token cannot be checked, and the record alone keeps its write once.
		return Result{Degraded: []string{layerToken}}, nil, false
	case state == tokenInvalid:
		// A token used long ago may have expired while its record remains.
		if res, found, err := g.fromRecord(ctx, req); found || err != nil {
			return res, err, true
		}
		return Result{Outcome: TokenInvalid, Layer: layerToken}, ErrTokenInvalid, true
	}
	return Result{}, nil, false
}

// token reads what Redis holds of a one-time token (idemops.TokenOf): the scope it was issued
// to, whether a submission used it, and how long Redis keeps it.
func (g *Guard) token(ctx context.Context, token string) (opskit.Token, error) {
	if g.rdb == nil || !isToken(token) {
		return opskit.Token{}, nil
	}
	pipe := g.rdb.Pipeline()
	get := pipe.Get(ctx, g.tokenKey(token))
	ttl := pipe.PTTL(ctx, g.tokenKey(token))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return opskit.Token{}, err
	}
	v, err := get.Result()
	if errors.Is(err, redis.Nil) {
		return opskit.Token{}, nil
	}
	scope, used := strings.CutPrefix(v, "used:")
	return opskit.Token{Found: true, Used: used, Scope: scope, TTL: max(ttl.Val(), 0)}, nil
}
