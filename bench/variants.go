package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"time"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemlab"
)

// variant is one HTTP server put under load.
type variant struct {
	name string
	// baseline names the variant whose req/s the ratio divides by; a baseline names itself.
	baseline string
	// start starts the server and returns what the load generator sends to it, and the
	// function that stops the server.
	start func(ctx context.Context, e *env) (target, func(), error)
}

// extraVariants are the variants of other files (server.go), run after the others.
var extraVariants []variant

// allVariants lists every variant in the order they run.
func allVariants() []variant {
	vs := []variant{
		{name: "bare", baseline: "bare", start: startBare},
		guardVariant("guard-all", idempotent.Config{}),
		guardLastVariant("guard-all-last", idempotent.Config{}),
		guardLastVariant("guard-dedup-last", idemlab.With(idempotent.Config{}, idemlab.Lab{NoLock: true, NoCache: true})),
		guardVariant("guard-dedup", idemlab.With(idempotent.Config{}, idemlab.Lab{NoLock: true, NoCache: true})),
		guardVariant("guard-lock+dedup", idemlab.With(idempotent.Config{}, idemlab.Lab{NoCache: true})),
		guardVariant("guard-redsync", idemlab.With(idempotent.Config{}, idemlab.Lab{RedsyncLock: true})),
		guardVariant("guard-recordfirst", idemlab.With(idempotent.Config{}, idemlab.Lab{RecordFirst: true})),
		{name: "fiber-bare", baseline: "fiber-bare", start: startFiberBare},
		{name: "fiber-idem", baseline: "fiber-bare", start: startFiberIdem},
		{name: "floor-replay", baseline: "floor-replay", start: startFloorReplay},
		{name: "guard-replay", baseline: "floor-replay", start: startGuardReplay},
		{name: "fiber-replay", baseline: "fiber-bare", start: startFiberReplay},
	}
	return append(vs, extraVariants...)
}

// selectVariants keeps the variants whose name matches re.
func selectVariants(vs []variant, re *regexp.Regexp) []variant {
	var out []variant
	for _, v := range vs {
		if re.MatchString(v.name) {
			out = append(out, v)
		}
	}
	return out
}

// startBare serves the transaction with net/http and nothing else.
func startBare(_ context.Context, e *env) (target, func(), error) {
	url, stop, err := serveHTTP(benchMux(bareHandler(e.orders)))
	return e.newKeyTarget(url + "/orders"), stop, err
}

// guardVariant is the transaction behind a guard with cfg, a new key per request.
func guardVariant(name string, cfg idempotent.Config) variant {
	return variant{name: name, baseline: "bare", start: func(_ context.Context, e *env) (target, func(), error) {
		url, stop, err := serveHTTP(benchMux(guardHandler(e.newGuard(name, cfg), e.orders)))
		return e.newKeyTarget(url + "/orders"), stop, err
	}}
}

// guardLastVariant is guardVariant with the hot stock UPDATE after the dedup record
// (the work places its record before the hot row).
func guardLastVariant(name string, cfg idempotent.Config) variant {
	return variant{name: name, baseline: "bare", start: func(_ context.Context, e *env) (target, func(), error) {
		url, stop, err := serveHTTP(benchMux(guardHandlerWith(e.newGuard(name, cfg), e.orders, true)))
		return e.newKeyTarget(url + "/orders"), stop, err
	}}
}

// startFiberBare serves the transaction with gofiber and nothing else.
func startFiberBare(_ context.Context, e *env) (target, func(), error) {
	url, stop, err := e.serveFiber(newFiberApp(e.orders, nil))
	return e.newKeyTarget(url + "/orders"), stop, err
}

// startFiberIdem serves the transaction behind gofiber's idempotency middleware on Redis.
func startFiberIdem(_ context.Context, e *env) (target, func(), error) {
	storage := e.newFiberStorage(e.prefix + "fiber-idem:")
	url, stop, err := e.serveFiber(newFiberApp(e.orders, storage))
	return e.newKeyTarget(url + "/orders"), stop, err
}

// startGuardReplay serves the guard with every layer and sends one key once; the load then
// replays that key.
func startGuardReplay(ctx context.Context, e *env) (target, func(), error) {
	url, stop, err := serveHTTP(benchMux(guardHandler(e.newGuard("guard-replay", idempotent.Config{}), e.orders)))
	if err != nil {
		return target{}, nil, err
	}
	t, err := e.replayTarget(ctx, e.newKeyTarget(url+"/orders"))
	if err != nil {
		stop()
	}
	return t, stop, err
}

// startFloorReplay serves the least any replay from Redis can cost with net/http: one GET of
// a stored answer's bytes, written back with its status and content type. The guard's
// replays are measured against it.
func startFloorReplay(ctx context.Context, e *env) (target, func(), error) {
	key := e.prefix + "floor-replay"
	body := []byte(`{"order_id":"1000000000000000001"}` + "\n")
	if err := e.rdb.Set(ctx, key, body, time.Hour).Err(); err != nil {
		return target{}, nil, err
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stored, err := e.rdb.Get(r.Context(), key).Bytes()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(headerReplayed, "true")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(stored)
	})
	url, stop, err := serveHTTP(benchMux(h))
	if err != nil {
		return target{}, nil, err
	}
	t := e.newKeyTarget(url + "/orders")
	t.check = func(a answer) error {
		if a.status != http.StatusCreated || !bytes.Equal(a.body, body) {
			return fmt.Errorf("status %d body %q, want the stored answer", a.status, a.body)
		}
		return nil
	}
	return t, stop, nil
}

// startFiberReplay is startGuardReplay for gofiber's idempotency middleware.
func startFiberReplay(ctx context.Context, e *env) (target, func(), error) {
	storage := e.newFiberStorage(e.prefix + "fiber-replay:")
	url, stop, err := e.serveFiber(newFiberApp(e.orders, storage))
	if err != nil {
		return target{}, nil, err
	}
	t, err := e.replayTarget(ctx, e.newKeyTarget(url+"/orders"))
	if err != nil {
		stop()
	}
	return t, stop, err
}

// newKeyTarget sends the order body to url with a new Idempotency-Key every time.
func (e *env) newKeyTarget(url string) target {
	return target{url: url, body: orderBody, key: e.newKey}
}

// replayTarget sends one request of t with a new key, then returns t with that key fixed,
// accepting only a replay: 201, the first body, Idempotent-Replayed: true.
func (e *env) replayTarget(ctx context.Context, t target) (target, error) {
	key := e.newKey()
	t.key = func() string { return key }
	first, err := sendOnce(ctx, t)
	if err != nil {
		return target{}, fmt.Errorf("first request of the replay key: %w", err)
	}
	if first.status != http.StatusCreated {
		return target{}, fmt.Errorf("first request of the replay key answered %d %s", first.status, first.body)
	}
	t.check = func(a answer) error {
		switch {
		case a.status != http.StatusCreated:
			return fmt.Errorf("status %d", a.status)
		case !bytes.Equal(a.body, first.body):
			return fmt.Errorf("body differs from the first answer")
		case a.header.Get(headerReplayed) != "true":
			return fmt.Errorf("not marked %s", headerReplayed)
		}
		return nil
	}
	return t, nil
}

// benchMux routes POST /orders to orders and answers GET /ping, which the storms use to open
// their connections beforehand.
func benchMux(orders http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", orders)
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

// serveHTTP serves h with net/http on a random port of 127.0.0.1 and returns its base URL
// and the function that stops it.
func serveHTTP(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 120 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// sendOnce sends one request of t on a client of its own.
func sendOnce(ctx context.Context, t target) (answer, error) {
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	return t.send(ctx, client)
}
