package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemlab"
	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/ids"

	"gorm.io/gorm"
)

// The real server's order request: alice, a demo user with a seeded API key, buys one unit
// of the demo SKU SKU-1002, whose stock the bench first raises so that no run sells out.
const (
	serverSKU = "SKU-1002"
	// aliceKey is the key of the bench's own user, made in each server's database by
	// ensureBenchUser: on a real database the demo users get random keys (internal/app/seed.go).
	aliceKey   = "bench-alice-key"
	ordersPath = "/v1/orders"
)

var serverOrderBody = []byte(`{"items":[{"sku":"SKU-1002","quantity":1}]}`)

func init() {
	extraVariants = append(extraVariants,
		variant{name: "service-orders", baseline: "bare", start: startServiceOrders},
		variant{name: "server-orders-unguarded", baseline: "bare", start: startServerUnguarded},
		variant{name: "server-orders", baseline: "bare", start: startServerOrders},
		variant{name: "server-orders-replay", baseline: "floor-replay", start: startServerReplay},
	)
}

// oncepayServer is a real server, built once per process on first use and shared by the
// variants that use it and by every run; the variants run one at a time, so it needs no lock.
type oncepayServer struct {
	url string
	err error
	app *app.App
	// alice is the id of the bench's user in the server's database.
	alice int64
}

// oncepayServers are the real servers by name: "guarded", and "unguarded" with the guard
// switched off (idemlab.Lab.Unguarded).
var oncepayServers = map[string]*oncepayServer{}

// startServerOrders sends POST /v1/orders to the real server with a new key every time.
func startServerOrders(ctx context.Context, e *env) (target, func(), error) {
	url, err := e.oncepayURL(ctx, "guarded")
	return serverTarget(e, url), func() {}, err
}

// startServerUnguarded sends POST /v1/orders to a real server whose guard is switched off:
// the same router, authentication, decoding, use case and transaction, without the key's
// layers and dedup record.
func startServerUnguarded(ctx context.Context, e *env) (target, func(), error) {
	url, err := e.oncepayURL(ctx, "unguarded")
	return serverTarget(e, url), func() {}, err
}

// startServiceOrders is a probe of what the route's own statements cost: a net/http handler
// that runs order.Service.Create of the unguarded server in a transaction, for alice and one
// unit of serverSKU, and answers the order's id. It sends the route's statements in the
// route's round trips (BEGIN, the price read, one batch of the new rows and the stock UPDATE,
// COMMIT: as many as bare's), and skips everything else the route does: the router, the
// authentication, the body's decoding and validation, the guard, the view's JSON, the logging
// and metrics middleware. Against bare it measures the rows; against server-orders-unguarded,
// the HTTP layers around them.
func startServiceOrders(ctx context.Context, e *env) (target, func(), error) {
	s := e.oncepay(ctx, "unguarded")
	if s.err != nil {
		return target{}, nil, s.err
	}
	orders, db := s.app.Orders(), s.app.DB
	lines := []order.Line{{SKU: serverSKU, Quantity: 1}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			writeJSON(w, http.StatusBadRequest, errorJSON("unreadable_body"))
			return
		}
		var o order.Order
		err := db.WithContext(r.Context()).Transaction(func(tx *gorm.DB) error {
			var err error
			o, err = orders.Create(r.Context(), tx, s.alice, lines, nil)
			return err
		})
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, errorJSON("internal"))
			return
		}
		writeJSON(w, http.StatusCreated, orderJSON(o.ID))
	})
	url, stop, err := serveHTTP(benchMux(h))
	return e.newKeyTarget(url + "/orders"), stop, err
}

// startServerReplay sends one POST /v1/orders, then replays its key.
func startServerReplay(ctx context.Context, e *env) (target, func(), error) {
	url, err := e.oncepayURL(ctx, "guarded")
	if err != nil {
		return target{}, nil, err
	}
	t, err := e.replayTarget(ctx, serverTarget(e, url))
	return t, func() {}, err
}

// serverTarget is alice's order request at the server at url.
func serverTarget(e *env, url string) target {
	return target{
		url:    url + ordersPath,
		body:   serverOrderBody,
		header: http.Header{"Authorization": {"Bearer " + aliceKey}},
		key:    e.newKey,
	}
}

// oncepay returns the real server name, starting it the first time; its err says why it
// could not start.
func (e *env) oncepay(ctx context.Context, name string) *oncepayServer {
	s, ok := oncepayServers[name]
	if !ok {
		s = &oncepayServer{}
		oncepayServers[name] = s
		s.app, s.alice, s.url, s.err = e.startOncepay(ctx, name, idemlab.Lab{Unguarded: name == "unguarded"})
	}
	return s
}

// oncepayURL returns the base URL of the real server name, starting it the first time.
func (e *env) oncepayURL(ctx context.Context, name string) (string, error) {
	s := e.oncepay(ctx, name)
	return s.url, s.err
}

// startOncepay builds oncepay with internal/app on a database of its own, the bench's Redis
// and an embedded Kafka, with the guard's lab switches, serves its router with net/http
// like the other variants (the background loops do not run: only the request path is
// measured), and raises the stock of serverSKU. Everything is undone when the environment
// closes. It returns the app, the id of the bench's user and the server's base URL.
func (e *env) startOncepay(ctx context.Context, name string, lab idemlab.Lab) (*app.App, int64, string, error) {
	cfg, err := e.oncepayConfig(ctx, name)
	if err != nil {
		return nil, 0, "", err
	}
	e.defer1(func() { e.deleteRedisKeys(cfg.RedisPrefix + "*") })
	a, err := app.New(ctx, cfg, app.Deps{GuardConfig: func(c idempotent.Config) idempotent.Config { return idemlab.With(c, lab) }})
	if err != nil {
		return nil, 0, "", fmt.Errorf("app.New: %w", err)
	}
	e.defer1(a.Close)
	alice, err := ensureBenchUser(ctx, a.DB)
	if err != nil {
		return nil, 0, "", err
	}
	url, stop, err := serveHTTP(a.Handler())
	if err != nil {
		return nil, 0, "", err
	}
	e.defer1(stop)
	return a, alice, url, raiseStock(ctx, url, cfg.AdminKey)
}

// oncepayConfig is the default configuration with a MySQL database of the server's own
// (oncepay_bench_<name>_<runID>), the bench's Redis under a prefix of its own, an embedded
// Kafka on a random port, random secrets, and the demo data seeded.
func (e *env) oncepayConfig(ctx context.Context, name string) (config.Config, error) {
	cfg, err := config.LoadFrom(func(string) (string, bool) { return "", false })
	if err != nil {
		return cfg, err
	}
	cfg.RedisPrefix = e.prefix + "srv-" + name + ":"
	dsn, err := e.createSchema(ctx, "oncepay_bench_"+name+"_"+e.runID)
	if err != nil {
		return cfg, err
	}
	dataDir, err := os.MkdirTemp("", "oncepay-bench-")
	if err != nil {
		return cfg, err
	}
	e.defer1(func() { _ = os.RemoveAll(dataDir) })
	cfg.MySQLDSN = dsn.FormatDSN()
	cfg.EmbeddedChannelAddr = "127.0.0.1:0" // a channel simulator of its own, on a free port
	cfg.RedisAddrs = []string{e.redisAddr}
	cfg.KafkaBrokers = nil
	cfg.EmbeddedKafkaAddr = "127.0.0.1:0"
	cfg.DataDir = dataDir
	cfg.AdminKey = "bench-admin-" + randomHex(8)
	cfg.ChannelSecret = "bench-secret-" + randomHex(8)
	for i := range cfg.Channels {
		cfg.Channels[i].Secret = cfg.ChannelSecret
	}
	cfg.SeedDemo = true
	return cfg, nil
}

// raiseStock sets serverSKU's stock to a billion with the admin API.
func raiseStock(ctx context.Context, url, adminKey string) error {
	body := []byte(`{"price":1999,"available":1000000000}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url+"/v1/admin/inventory/"+serverSKU, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT /v1/admin/inventory/%s answered %d", serverSKU, res.StatusCode)
	}
	return nil
}

// ensureBenchUser makes the user whose key is aliceKey in db, unless it exists, and returns
// the user's id.
func ensureBenchUser(ctx context.Context, db *gorm.DB) (int64, error) {
	gen, err := ids.New(1000)
	if err != nil {
		return 0, err
	}
	id, err := account.NewUsers(db, gen).Ensure(ctx, "bench-alice", aliceKey)
	if err != nil {
		return 0, fmt.Errorf("the bench's user: %w", err)
	}
	return id, nil
}
