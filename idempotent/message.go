package idempotent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// errMessageInFlight means another consumer is processing a copy of this message right now;
// the caller must not acknowledge it, and the broker redelivers it later. It is ErrKeyInUse
// to errors.Is.
var errMessageInFlight = &Error{Code: ErrKeyInUse.Code, Detail: "a copy of this message is being processed; do not acknowledge it"}

// releaseMarkerScript deletes a "processing" marker only if this consumer set it.
var releaseMarkerScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// Message processes a consumed message exactly once (000 §4.4). Redis SET NX EX is the first
// filter: a copy whose marker says "done" is a duplicate and may be acknowledged at once.
// Otherwise the message goes through Do, whose dedup record in the consumer's transaction is
// the backstop — and the same record an HTTP copy of the same business fact converges on (I1).
//
// The caller acknowledges when err is nil (executed or replayed) and also on ErrKeyReused (a
// deterministic refusal); on any other error it must not, so that the message is redelivered:
// ErrKeyInUse while another consumer processes a copy of it.
// A work outcome that is not stored (see storable) is such an error.
func (g *Guard) Message(ctx context.Context, req Request, work Work) (Result, error) {
	if g.rdb == nil {
		return g.messageWithoutMarker(ctx, req, work)
	}
	marker := g.markerKey(req.Key)
	owner := fmt.Sprintf("processing:%.16s:%s", req.Fingerprint, randomSuffix())
	set, err := g.rdb.SetNX(ctx, marker, owner, g.cfg.LockTTL).Result()
	switch {
	case err != nil:
		if err := g.redisFailed(layerMessage, err); err != nil {
			return Result{Outcome: Unavailable, Layer: layerMessage}, err
		}
	case !set:
		v, gerr := g.rdb.Get(ctx, marker).Result()
		if gerr == nil && strings.HasPrefix(v, "done") {
			res := Result{Outcome: Replayed, Layer: layerMessage}
			g.observe(ctx, req.Key, res, nil, time.Now())
			return res, nil
		}
		if gerr == nil {
			return Result{Outcome: InProgress, Layer: layerMessage}, errMessageInFlight
		}
		// The marker vanished between the two calls: let the backstop decide.
	}

	res, err := g.Do(ctx, req, work)
	if err == nil && !storable(res.Response.Status) {
		// Rolled back and not stored (5xx, 401 …): nothing happened, so this copy must be
		// redelivered, neither acknowledged nor marked done.
		err = fmt.Errorf("the work answered %d: nothing stored, redeliver", res.Response.Status)
	}
	bg := context.WithoutCancel(ctx)
	if err == nil {
		_ = g.rdb.Set(bg, marker, "done", g.cfg.MessageTTL).Err()
	} else if set {
		_ = releaseMarkerScript.Run(bg, g.rdb, []string{marker}, owner).Err()
	}
	return res, err
}

// messageWithoutMarker is Message on a guard without Redis: the dedup record alone.
func (g *Guard) messageWithoutMarker(ctx context.Context, req Request, work Work) (Result, error) {
	res, err := g.Do(ctx, req, work)
	if err == nil && !storable(res.Response.Status) {
		err = fmt.Errorf("the work answered %d: nothing stored, redeliver", res.Response.Status)
	}
	return res, err
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
