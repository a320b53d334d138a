// Package idemtest gives tests of the idempotency kit — its own, and a service's that uses it —
// their real dependencies, and nothing of oncepay's service: a fresh database of each dialect
// holding only the kit's table (idempotent.Schema), created and dropped per test, an isolated
// Redis, a Redis that is down, and a private Redis Cluster; and Run, the conformance suite
// that checks the kit's promises on an adopter's own database and Redis.
//
//	ONCEPAY_TEST_MYSQL_DSN     a MySQL or MariaDB server (root DSN); its dialect is tested
//	ONCEPAY_TEST_POSTGRES_DSN  a PostgreSQL server (a DSN that may CREATE DATABASE)
//	ONCEPAY_TEST_REDIS_ADDR    a Redis server; without it, miniredis
//
// SQLite is always tested. With CI=true every variable is required: a dialect that cannot be
// reached fails the test loudly instead of being skipped.
package idemtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/glebarez/sqlite"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/mysqlerr"
	"github.com/oncepay/oncepay/idempotent/pgerr"
	"github.com/oncepay/oncepay/idempotent/sqliteerr"
)

// The environment variables that point the tests at real servers.
const (
	EnvMySQL    = "ONCEPAY_TEST_MYSQL_DSN"
	EnvPostgres = "ONCEPAY_TEST_POSTGRES_DSN"
	EnvRedis    = "ONCEPAY_TEST_REDIS_ADDR"
)

// The dialects, by gorm's dialector names (the keys of idempotent.Schema).
const (
	MySQL    = "mysql"
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// InCI reports whether the tests run in CI (CI=true), where every server is mandatory.
func InCI() bool { return os.Getenv("CI") == "true" }

// RequireMySQL skips a test that only means something on MySQL (a concurrency storm, a
// benchmark) when no MySQL is configured; in CI a missing MySQL fails instead.
func RequireMySQL(tb testing.TB) {
	tb.Helper()
	switch {
	case os.Getenv(EnvMySQL) != "":
	case InCI():
		tb.Fatalf("%s is not set but CI=true: this test needs a real MySQL", EnvMySQL)
	default:
		tb.Skipf("needs a real MySQL: set %s", EnvMySQL)
	}
}

// Dialects are the dialects this run tests: SQLite always, MySQL and PostgreSQL when their
// servers are configured (always in CI).
func Dialects(tb testing.TB) []string {
	tb.Helper()
	out := []string{SQLite}
	for _, d := range []struct{ name, env string }{{MySQL, EnvMySQL}, {Postgres, EnvPostgres}} {
		switch {
		case os.Getenv(d.env) != "":
			out = append(out, d.name)
		case InCI():
			tb.Fatalf("%s is not set but CI=true: the kit must be tested on %s", d.env, d.name)
		}
	}
	return out
}

// EnvDialect names the dialect the kit's own suite runs on (mysql, sqlite or postgres);
// `make test` runs the suite once per dialect.
const EnvDialect = "ONCEPAY_TEST_KIT_DIALECT"

// Default is the dialect of a test's database: ONCEPAY_TEST_KIT_DIALECT when set, else MySQL
// when configured (always in CI), else SQLite.
func Default() string {
	if d := os.Getenv(EnvDialect); d != "" {
		return d
	}
	if os.Getenv(EnvMySQL) != "" || InCI() {
		return MySQL
	}
	return SQLite
}

// Classify is the kit's classifier of dialect.
func Classify(dialect string) func(error) dberr.Class {
	switch dialect {
	case MySQL:
		return mysqlerr.Classify
	case Postgres:
		return pgerr.Classify
	}
	return sqliteerr.Classify
}

// DB returns a fresh database of dialect with the kit's table, dropped when the test ends.
func DB(tb testing.TB, dialect string) *gorm.DB {
	tb.Helper()
	var (
		db  *gorm.DB
		err error
	)
	cfg := &gorm.Config{Logger: logger.Discard, NowFunc: func() time.Time { return time.Now().UTC() }}
	switch dialect {
	case SQLite:
		path := filepath.Join(tb.TempDir(), "kit.db")
		// WAL lets readers run beside the writer; _txlock=immediate takes the write lock at
		// BEGIN, so that two writers queue on busy_timeout instead of failing to upgrade.
		db, err = gorm.Open(sqlite.Open("file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"+
			"&_pragma=synchronous(NORMAL)&_txlock=immediate"), cfg)
		if err == nil {
			sqlDB, _ := db.DB()
			sqlDB.SetMaxOpenConns(8)
		}
	case MySQL:
		db, err = gorm.Open(mysql.Open(created(tb, dialect)), cfg)
	case Postgres:
		db, err = gorm.Open(postgres.Open(created(tb, dialect)), cfg)
	default:
		tb.Fatalf("unknown dialect %q", dialect)
	}
	if err != nil {
		tb.Fatalf("open %s: %v", dialect, err)
	}
	if dialect != SQLite {
		// A storm of hundreds of copies must queue for connections, not exhaust the server's.
		sqlDB, _ := db.DB()
		sqlDB.SetMaxOpenConns(32)
		sqlDB.SetMaxIdleConns(32)
	}
	tb.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	if err := idempotent.CreateSchema(db); err != nil {
		tb.Fatalf("create the kit's table on %s: %v", dialect, err)
	}
	return db
}

// created creates a database of its own on the dialect's server and returns its DSN; it is
// dropped when the test ends.
func created(tb testing.TB, dialect string) string {
	tb.Helper()
	env := map[string]string{MySQL: EnvMySQL, Postgres: EnvPostgres}[dialect]
	raw := os.Getenv(env)
	if raw == "" {
		tb.Fatalf("%s is not set: cannot test %s", env, dialect)
	}
	name := "idem_t_" + randomHex(6)
	var admin *gorm.DB
	var err error
	var dsn string
	if dialect == MySQL {
		c, perr := gomysql.ParseDSN(raw)
		if perr != nil {
			tb.Fatalf("%s: %v", env, perr)
		}
		admin, err = gorm.Open(mysql.Open(raw), &gorm.Config{Logger: logger.Discard})
		c.DBName, c.ParseTime, c.Loc = name, true, time.UTC
		dsn = c.FormatDSN()
	} else {
		c, perr := pgx.ParseConfig(raw)
		if perr != nil {
			tb.Fatalf("%s: %v", env, perr)
		}
		admin, err = gorm.Open(postgres.Open(raw), &gorm.Config{Logger: logger.Discard})
		dsn = fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", c.Host, c.Port, c.User, name)
		if c.Password != "" {
			dsn += " password=" + c.Password
		}
	}
	if err != nil {
		tb.Fatalf("%s at %s is unreachable: %v", dialect, env, err)
	}
	if err := admin.Exec("CREATE DATABASE " + name).Error; err != nil {
		tb.Fatalf("%s refuses CREATE DATABASE: %v", dialect, err)
	}
	closeDB(admin)
	tb.Cleanup(func() {
		var drop *gorm.DB
		if dialect == MySQL {
			drop, err = gorm.Open(mysql.Open(raw), &gorm.Config{Logger: logger.Discard})
		} else {
			drop, err = gorm.Open(postgres.Open(raw), &gorm.Config{Logger: logger.Discard})
		}
		if err == nil {
			_ = drop.Exec("DROP DATABASE IF EXISTS " + name + map[string]string{Postgres: " WITH (FORCE)"}[dialect]).Error
			closeDB(drop)
		}
	})
	return dsn
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		_ = sqlDB.Close()
	}
}

// Redis returns an isolated Redis for one test: one of the logical databases 1..15 of
// ONCEPAY_TEST_REDIS_ADDR, leased (the lease is a key in database 0, shared with oncepay's
// tests, so that packages running at once never share one) and flushed; or a miniredis.
func Redis(tb testing.TB) *redis.Client {
	tb.Helper()
	addr := os.Getenv(EnvRedis)
	if addr == "" {
		if InCI() {
			tb.Fatalf("%s is not set but CI=true: the kit must be tested on a real Redis", EnvRedis)
		}
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.Start(); err != nil {
			tb.Fatalf("start miniredis: %v", err)
		}
		tb.Cleanup(m.Close)
		c := client(m.Addr(), 0)
		tb.Cleanup(func() { _ = c.Close() })
		return c
	}
	c := client(addr, LeaseRedisDB(tb, addr))
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// LeaseRedisDB leases one of the logical databases 1..15 of the Redis at addr for the test,
// flushed, and returns its number; the test's cleanup flushes and releases it. The lease is a
// key in database 0 that every test package on the machine takes the same way (oncepay's test
// support too), so that packages running at once never share a database. It waits up to 2 min
// for one to be free.
func LeaseRedisDB(tb testing.TB, addr string) int {
	tb.Helper()
	ctx := context.Background()
	leases := redis.NewClient(&redis.Options{Addr: addr})
	defer leases.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		for db := 1; db <= 15; db++ {
			key := fmt.Sprintf("oncepay:test:lease:%d", db)
			ok, err := leases.SetNX(ctx, key, os.Getpid(), 10*time.Minute).Result()
			if err != nil {
				tb.Fatalf("Redis at %s is unreachable: %v", addr, err)
			}
			if !ok {
				continue
			}
			flush := func() error {
				c := redis.NewClient(&redis.Options{Addr: addr, DB: db})
				defer c.Close()
				return c.FlushDB(context.Background()).Err()
			}
			if err := flush(); err != nil {
				tb.Fatalf("flush Redis db %d: %v", db, err)
			}
			tb.Cleanup(func() {
				_ = flush()
				release := redis.NewClient(&redis.Options{Addr: addr})
				_ = release.Del(context.Background(), key).Err()
				_ = release.Close()
			})
			return db
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no free Redis database on %s after 2m: 15 are leased", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// client is a Redis client as a service would configure one for the guard: short timeouts and
// no retries, so that with Redis down the layers step aside at once.
func client(addr string, db int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, DB: db, DialTimeout: 500 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, PoolSize: 64, MaxRetries: -1, DialerRetries: 1})
}

// Unreachable is a client for an address where nothing listens: Redis down.
func Unreachable(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
