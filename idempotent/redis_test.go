package idempotent_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemlab"
)

// hashTag returns the Redis Cluster hash tag of key: the text between its first '{' and the
// next '}', or "" when it has none.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}

// TestRedisKeysShareOneHashTag: the replay cache, the lease and the consumer marker of one
// key live in one Redis Cluster slot, so one Lua script may touch them together; the tag is
// the whole key (scope, biz type, biz key), so two keys never share it, and the prefix is
// configurable.
func TestRedisKeysShareOneHashTag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := idempotent.Key{Scope: "user:42", BizType: "idempotency-key", BizKey: "8e03978e-40d5-43e8"}
	other := idempotent.Key{Scope: "user:43", BizType: "idempotency-key", BizKey: "8e03978e-40d5-43e8"}
	for _, prefix := range []string{"", "tenant-a:"} {
		g := e.guard(idempotent.Config{KeyPrefix: prefix})
		want := prefix + "idem:"
		keys := map[string]string{"cache": g.CacheKey(k), "lease": g.LeaseKey(k), "marker": g.MarkerKey(k)}
		for name, key := range keys {
			if !strings.HasPrefix(key, want) {
				t.Errorf("prefix %q: %s key %q does not start with %q", prefix, name, key, want)
			}
			if got := hashTag(key); got != k.String() {
				t.Errorf("prefix %q: %s key %q has hash tag %q, want %q", prefix, name, key, got, k.String())
			}
			if strings.Count(key, "{") != 1 || strings.Count(key, "}") != 1 {
				t.Errorf("prefix %q: %s key %q has more than one brace pair", prefix, name, key)
			}
		}
		if keys["cache"] == keys["lease"] || keys["lease"] == keys["marker"] || keys["cache"] == keys["marker"] {
			t.Errorf("prefix %q: the layers share a Redis key: %v", prefix, keys)
		}
		if hashTag(g.CacheKey(other)) == hashTag(g.CacheKey(k)) {
			t.Errorf("two users' keys share the hash tag %q", hashTag(g.CacheKey(k)))
		}
		if tok := g.TokenKey("tok_abc"); !strings.HasPrefix(tok, want+"token:") || !strings.HasSuffix(tok, "tok_abc") {
			t.Errorf("prefix %q: token key %q", prefix, tok)
		}
	}
}

// commandLog is a go-redis hook that records every command a client sends.
type commandLog struct {
	mu   sync.Mutex
	cmds [][]any
}

// DialHook passes dials through.
func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook records the command.
func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook records every command of the pipeline.
func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			l.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (l *commandLog) add(cmd redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cmds = append(l.cmds, cmd.Args())
}

// take returns the commands recorded since the last take and forgets them.
func (l *commandLog) take() [][]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	cmds := l.cmds
	l.cmds = nil
	return cmds
}

// names are the command names of cmds, lower case.
func names(cmds [][]any) []string {
	out := make([]string, len(cmds))
	for i, c := range cmds {
		out[i] = strings.ToLower(c[0].(string))
	}
	return out
}

// scriptKeys returns the keys an EVAL or EVALSHA command passes to its script.
func scriptKeys(t *testing.T, cmd []any) []string {
	t.Helper()
	var n int
	switch v := cmd[2].(type) {
	case int:
		n = v
	case int64:
		n = int(v)
	default:
		t.Fatalf("%v: numkeys of type %T", cmd, cmd[2])
	}
	keys := make([]string, n)
	for i := range n {
		keys[i], _ = cmd[3+i].(string)
	}
	return keys
}

// TestRoundTrips counts the Redis commands of one write with a go-redis hook on a client of
// its own. A write fenced by its record alone (no work outside its transaction) sends Redis
// nothing on its path, a new key or a duplicate: its answers are kept in the guard's memory
// (issue 26, item 5). A leased write — through every layer: cache miss, lease, work, dedup
// record, cache fill, release — costs exactly two round trips, one script before the work
// (the claim: cache read and lease) and one after it (the release: cache fill and
// compare-and-delete), and each script touches only keys of the write's hash tag; a duplicate
// answered from the cache costs one. The attempt log is sent off the request's path, in a
// pipeline of its own: it is drained before each count and must be exactly one XADD and one
// PEXPIRE per attempt. So is the guard's read of its answers' epoch, at most once a second,
// shared by every key. The scripts are loaded into Redis first, so that go-redis's EVALSHA
// does not fall back to EVAL (NOSCRIPT) during the count. The redsync lock is logged for
// comparison.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	opts := *e.rdb.Options()
	opts.PoolSize = 1
	client := redis.NewClient(&opts)
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil { // the connection's handshake, before the hook
		t.Fatal(err)
	}
	log := &commandLog{}
	client.AddHook(log)

	for _, tt := range []struct {
		name          string
		cfg           idempotent.Config
		counted       bool     // false: only log the commands
		claim, finish int      // commands before and after the work of a new key
		replay        int      // commands of a duplicate answered from the cache
		leased        bool     // the request has work outside its transaction (Before)
		commands      []string // the only commands a new key may send
	}{
		{"fenced", idempotent.Config{}, true, 0, 0, 0, false, nil},
		{"lease", idempotent.Config{}, true, 1, 1, 1, true, []string{"evalsha", "eval"}},
		{"redsync", idemlab.With(idempotent.Config{}, idemlab.Lab{RedsyncLock: true}), false, 0, 0, 0, true, nil},
	} {
		g := e.guardWith(client, tt.cfg)
		request := func(k idempotent.Key, body string) idempotent.Request {
			if tt.leased {
				return leased(request(k, body))
			}
			return request(k, body)
		}
		var beforeWork [][]any
		work := func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
			beforeWork = withoutEpoch(log.take())
			return effectWork("round-trips", 0, http.StatusCreated)(ctx, tx, record)
		}
		// take drains the attempt log and splits its commands from the request's.
		take := func(attempts int) [][]any {
			g.DrainAttemptLog()
			var path, logged [][]any
			for _, cmd := range withoutEpoch(log.take()) {
				if name := strings.ToLower(cmd[0].(string)); name == "xadd" || name == "pexpire" {
					logged = append(logged, cmd)
					continue
				}
				path = append(path, cmd)
			}
			if len(logged) != 2*attempts {
				t.Errorf("%s: the attempt log sent %v for %d attempts, want one XADD and one PEXPIRE each", tt.name, names(logged), attempts)
			}
			return path
		}
		warm := idempotent.Key{Scope: "user:1", BizType: "warm-up", BizKey: tt.name}
		mustExecute(t, g, request(warm, `{}`), work) // loads the scripts (EVALSHA, then EVAL on NOSCRIPT)
		t.Logf("%s, warm-up with the scripts not yet loaded: %v then %v", tt.name, names(beforeWork), names(take(1)))

		key := idempotent.Key{Scope: "user:1", BizType: "count", BizKey: tt.name}
		mustExecute(t, g, request(key, `{}`), work)
		afterWork := take(1)
		t.Logf("%s, new key: %v before the work, %v after it", tt.name, names(beforeWork), names(afterWork))
		if tt.counted && (len(beforeWork) != tt.claim || len(afterWork) != tt.finish) {
			t.Errorf("%s: a new key sent %v before the work and %v after it, want %d and %d commands",
				tt.name, names(beforeWork), names(afterWork), tt.claim, tt.finish)
		}
		if tt.counted {
			for _, cmd := range append(beforeWork, afterWork...) {
				name := strings.ToLower(cmd[0].(string))
				if !slices.Contains(tt.commands, name) {
					t.Errorf("%s: a new key sent %s, want only %v", tt.name, name, tt.commands)
					continue
				}
				if name == "get" || name == "set" {
					if k := cmd[1].(string); hashTag(k) != key.String() {
						t.Errorf("%s: %s touches %q, outside the hash tag {%s}", tt.name, name, k, key)
					}
					continue
				}
				for _, k := range scriptKeys(t, cmd) {
					if hashTag(k) != key.String() {
						t.Errorf("%s: %s touches %q, outside the hash tag {%s}", tt.name, name, k, key)
					}
				}
			}
		}

		res, err := g.Do(ctx, request(key, `{}`), work)
		if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerCache {
			t.Fatalf("%s: duplicate: outcome %q layer %q err %v, want replayed from the cache", tt.name, res.Outcome, res.Layer, err)
		}
		if cmds := take(1); tt.counted && len(cmds) != tt.replay {
			t.Errorf("%s: a duplicate answered from the cache sent %d Redis commands %v, want %d", tt.name, len(cmds), names(cmds), tt.replay)
		}
	}
}

// withoutEpoch drops the reads of the guard's answers' epoch from cmds: they are the guard's,
// at most one a second, not the key's.
func withoutEpoch(cmds [][]any) [][]any {
	return slices.DeleteFunc(cmds, func(cmd []any) bool {
		k, _ := cmd[len(cmd)-1].(string)
		return strings.EqualFold(cmd[0].(string), "get") && strings.HasSuffix(k, "idem:answers-epoch")
	})
}
