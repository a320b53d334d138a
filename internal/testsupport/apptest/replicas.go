package apptest

import (
	"slices"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/redisx"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// Replicas starts n instances on one database, as n servers behind a load balancer would
// run: each has its own connection pool (another pool on the same MySQL database; SQLite has
// one file and one pool), its own Redis client on one shared Redis database and its own node
// id (i+1 for the i-th, whatever opts say), and all of them share one Kafka. Each is started
// as by StartOn, with opts applied; every Server's DB is its own pool.
func Replicas(tb testing.TB, n int, opts ...Option) []*Server {
	tb.Helper()
	db, dsn := testenv.DBWithDSN(tb)
	shared := testenv.Redis(tb)
	cluster := testenv.Kafka(tb)
	servers := make([]*Server, n)
	for i := range servers {
		rdb := redisx.NewClient(shared.Addrs()[0], shared.DB())
		tb.Cleanup(func() { _ = rdb.Close() })
		deps := app.Deps{DB: OpenPool(tb, db, dsn), Redis: &redisx.Conn{Client: rdb}, Kafka: cluster}
		node := int64(i + 1)
		servers[i] = StartOn(tb, deps, append(slices.Clip(opts), func(cfg *config.Config) { cfg.NodeID = node })...)
	}
	return servers
}

// OpenPool opens another connection pool on the database of db, standing for another server:
// dsn is the one testenv.DBWithDSN returned with db. On SQLite (dsn "") there is one file and
// one pool, and OpenPool returns db. The new pool is closed when the test ends.
func OpenPool(tb testing.TB, db *gorm.DB, dsn string) *gorm.DB {
	tb.Helper()
	if dsn == "" {
		return db
	}
	pool, err := database.Open(database.Options{MySQLDSN: dsn, MaxOpenConns: 20})
	if err != nil {
		tb.Fatalf("open another pool: %v", err)
	}
	tb.Cleanup(func() { _ = database.Close(pool) })
	return pool
}

// At returns a Server for an instance the test did not build — a process of the binary —
// serving url with the configuration cfg, on the database db. Do and every helper built on it
// work as on a started instance; App is nil and Deps holds db alone.
func At(tb testing.TB, url string, cfg config.Config, db *gorm.DB) *Server {
	tb.Helper()
	return &Server{Config: cfg, DB: db, Deps: app.Deps{DB: db}, URL: url, client: newClient(tb)}
}
