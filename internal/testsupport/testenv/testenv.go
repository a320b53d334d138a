// Package testenv gives each test its own real dependencies: a fresh database (created,
// migrated and dropped on MySQL when ONCEPAY_TEST_MYSQL_DSN is set, a temporary SQLite file
// otherwise), an isolated Redis database (leased on ONCEPAY_TEST_REDIS_ADDR, miniredis
// otherwise) and an in-process Kafka broker reached over TCP. With CI=true a configured-but-
// unreachable or missing MySQL or Redis fails the test loudly instead of falling back.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/kafka"
)

// Environment variables that point the tests at real services.
const (
	EnvMySQLDSN  = "ONCEPAY_TEST_MYSQL_DSN"
	EnvRedisAddr = "ONCEPAY_TEST_REDIS_ADDR"
)

// InCI reports whether the tests run in CI, where real services are mandatory.
func InCI() bool { return os.Getenv("CI") == "true" }

// UsingMySQL reports whether DB returns MySQL databases. In CI it must.
func UsingMySQL() bool { return os.Getenv(EnvMySQLDSN) != "" }

// RequireMySQL skips a test that only means something on MySQL (a concurrency storm, a
// benchmark) when no MySQL is configured; in CI a missing MySQL fails instead.
func RequireMySQL(tb testing.TB) {
	tb.Helper()
	if UsingMySQL() {
		return
	}
	if InCI() {
		tb.Fatalf("%s is not set but CI=true: this test needs a real MySQL", EnvMySQLDSN)
	}
	tb.Skipf("needs a real MySQL: set %s", EnvMySQLDSN)
}

// OnBothDialects runs f twice, as the subtests "sqlite", on a fresh embedded SQLite database,
// and "mysql", on a fresh MySQL one (which RequireMySQL demands): for the tests that must hold
// on both dialects in one run.
func OnBothDialects(t *testing.T, f func(t *testing.T, db *gorm.DB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { f(t, SQLite(t)) })
	t.Run("mysql", func(t *testing.T) {
		RequireMySQL(t)
		f(t, DB(t))
	})
}

// SQLite returns a fresh, migrated embedded SQLite database, whatever the environment: for the
// tests that must hold on both dialects in one run (the money paths), beside DB.
func SQLite(tb testing.TB) *gorm.DB {
	tb.Helper()
	db, err := database.Open(database.Options{SQLitePath: filepath.Join(tb.TempDir(), "oncepay.db")})
	if err != nil {
		tb.Fatalf("open sqlite: %v", err)
	}
	if err := database.Migrate(context.Background(), db); err != nil {
		tb.Fatalf("migrate sqlite: %v", err)
	}
	tb.Cleanup(func() { _ = database.Close(db) })
	return db
}

// DB returns a fresh, migrated database that is dropped when the test ends.
func DB(tb testing.TB) *gorm.DB {
	tb.Helper()
	db, _ := DBWithDSN(tb)
	return db
}

// DBWithDSN is DB that also returns how to open the same database again (a MySQL DSN, or
// "" for SQLite), for tests that stand for several instances with separate pools.
func DBWithDSN(tb testing.TB) (*gorm.DB, string) {
	tb.Helper()
	ctx := context.Background()
	raw := os.Getenv(EnvMySQLDSN)
	if raw == "" {
		if InCI() {
			tb.Fatalf("%s is not set but CI=true: the suite must run against a real MySQL", EnvMySQLDSN)
		}
		return SQLite(tb), ""
	}

	cfg, err := gomysql.ParseDSN(raw)
	if err != nil {
		tb.Fatalf("%s: %v", EnvMySQLDSN, err)
	}
	name := "oncepay_t_" + randomHex(6)
	admin, err := database.Open(database.Options{MySQLDSN: raw, MaxOpenConns: 2})
	if err != nil {
		tb.Fatalf("connect to MySQL at %s: %v", cfg.Addr, err)
	}
	defer database.Close(admin)
	if err := admin.Exec("CREATE DATABASE " + name).Error; err != nil {
		tb.Fatalf("MySQL at %s is unreachable or refuses CREATE DATABASE: %v", cfg.Addr, err)
	}
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := database.Open(database.Options{MySQLDSN: dsn})
	if err != nil {
		tb.Fatalf("open %s: %v", name, err)
	}
	if err := database.Migrate(ctx, db); err != nil {
		tb.Fatalf("migrate %s: %v", name, err)
	}
	tb.Cleanup(func() {
		_ = database.Close(db)
		drop, err := database.Open(database.Options{MySQLDSN: raw, MaxOpenConns: 1})
		if err == nil {
			_ = drop.Exec("DROP DATABASE IF EXISTS " + name).Error
			_ = database.Close(drop)
		}
	})
	return db, dsn
}

// Kafka returns an in-process Kafka broker on a free port with the contract's topics,
// closed when the test ends. Clients reach it over TCP like a real broker.
func Kafka(tb testing.TB) *kafka.Cluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := kafka.Open(ctx, nil, kafka.EmbeddedOptions{Addr: "127.0.0.1:0"})
	if err != nil {
		tb.Fatalf("start kfake: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// NoKafka returns a Kafka whose only broker is an address where nothing listens: an instance
// built on it serves its routes, and anything that dials the broker fails at once. It stands
// for the Kafka of a test that does not need one.
func NoKafka(tb testing.TB) *kafka.Cluster {
	tb.Helper()
	return &kafka.Cluster{Brokers: []string{Nowhere(tb)}}
}

// Nowhere returns a host:port of 127.0.0.1 where nothing listens: a port the kernel handed out
// and that was closed again at once, so that a dial is refused instead of waiting.
func Nowhere(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Describe says which real services the tests use, for a log line at the start of a run.
func Describe() string {
	mysql, redis := "sqlite (temporary files)", "miniredis"
	if UsingMySQL() {
		mysql = "MySQL via " + EnvMySQLDSN
	}
	if os.Getenv(EnvRedisAddr) != "" {
		redis = "Redis at " + os.Getenv(EnvRedisAddr)
	}
	return fmt.Sprintf("database: %s; redis: %s", mysql, redis)
}
