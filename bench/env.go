package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/oncepay/oncepay/idempotent"
)

// env is what every variant shares: the bench database, the Redis client, the key prefix
// of this process, and the cleanups to run at the end.
type env struct {
	// base is the DSN from ONCEPAY_TEST_MYSQL_DSN, without a database name.
	base *gomysql.Config
	// dbName is the bench's own database, oncepay_bench_<runID>.
	dbName string
	db     *gorm.DB
	// redisAddr is ONCEPAY_TEST_REDIS_ADDR.
	redisAddr string
	rdb       *redis.Client
	// runID is random per process; every database and Redis key the bench makes carries it.
	runID string
	// prefix starts every Redis key the bench writes itself.
	prefix string
	orders *orders

	keys     atomic.Int64
	cleanups []func()
	// clusters counts the oncepay clusters started, to name each one's database.
	clusters int
	// binary is cmd/oncepay built for the variants that run it in processes of their own.
	binary string
}

// newEnv creates the bench database and its tables and connects to Redis.
func newEnv(ctx context.Context, rawDSN, redisAddr string) (_ *env, err error) {
	base, err := gomysql.ParseDSN(rawDSN)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envMySQLDSN, err)
	}
	base.DBName = ""
	e := &env{base: base, redisAddr: redisAddr, runID: randomHex(4)}
	e.prefix = "oncepay-bench:" + e.runID + ":"
	defer func() {
		if err != nil {
			e.close()
		}
	}()

	e.rdb = newRedisClient(redisAddr)
	e.defer1(func() { _ = e.rdb.Close() })
	if err := e.rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis at %s: %w", redisAddr, err)
	}
	e.defer1(func() { e.deleteRedisKeys(e.prefix + "*") })

	e.dbName = "oncepay_bench_" + e.runID
	if e.db, err = e.createDatabase(ctx, e.dbName); err != nil {
		return nil, err
	}
	if err := createTables(ctx, e.db); err != nil {
		return nil, err
	}
	e.orders = &orders{db: e.db}
	return e, nil
}

// defer1 registers a cleanup; close runs them in reverse order.
func (e *env) defer1(f func()) { e.cleanups = append(e.cleanups, f) }

// close runs the cleanups: servers stop, databases are dropped, Redis keys deleted.
func (e *env) close() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
}

// newKey returns an Idempotency-Key never used before: the run id and a sequence number,
// 36 characters long, the length gofiber's middleware insists on (a UUID's).
func (e *env) newKey() string {
	return fmt.Sprintf("%s-%027d", e.runID, e.keys.Add(1))
}

// createDatabase creates database name, opens it with oncepay's driver settings, and
// registers its drop.
func (e *env) createDatabase(ctx context.Context, name string) (*gorm.DB, error) {
	cfg, err := e.createSchema(ctx, name)
	if err != nil {
		return nil, err
	}
	db, err := openGorm(cfg)
	if err != nil {
		return nil, err
	}
	e.defer1(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	return db, nil
}

// createSchema creates the empty database name, registers its drop, and returns the DSN
// that points at it.
func (e *env) createSchema(ctx context.Context, name string) (*gomysql.Config, error) {
	admin, err := sql.Open("mysql", e.base.FormatDSN())
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	e.defer1(func() { e.dropDatabase(name) })
	cfg := e.base.Clone()
	cfg.DBName = name
	return cfg, nil
}

// dropDatabase drops a database the bench created; it runs at the end even after an
// interrupt, so it uses a context of its own.
func (e *env) dropDatabase(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("mysql", e.base.FormatDSN())
	if err != nil {
		slog.Error("drop database", "db", name, "err", err)
		return
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
		slog.Error("drop database", "db", name, "err", err)
	}
}

// openGorm opens cfg with the settings of oncepay's internal/platform/database: parameters
// interpolated client-side, times parsed as UTC, the session in UTC, no default
// transaction around single statements, and a pool of 50.
func openGorm(cfg *gomysql.Config) (*gorm.DB, error) {
	cfg.InterpolateParams = true
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	if _, ok := cfg.Params["time_zone"]; !ok {
		cfg.Params["time_zone"] = "'+00:00'"
	}
	db, err := gorm.Open(mysql.Open(cfg.FormatDSN()), &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", cfg.DBName, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(50)
	sqlDB.SetMaxIdleConns(50)
	sqlDB.SetConnMaxLifetime(30 * time.Minute)
	return db, nil
}

// The benchmark's tables: the hot stock row, the orders, and the guard's dedup records.
var tables = []string{
	`CREATE TABLE stock (
  sku       VARCHAR(64) COLLATE utf8mb4_bin PRIMARY KEY,
  available BIGINT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TABLE orders (
  id         BIGINT PRIMARY KEY,
  sku        VARCHAR(64),
  qty        INT,
  created_at DATETIME(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	idempotent.Schema["mysql"],
}

// createTables creates the tables and seeds the one stock row.
func createTables(ctx context.Context, db *gorm.DB) error {
	for _, ddl := range tables {
		if err := db.WithContext(ctx).Exec(ddl).Error; err != nil {
			return fmt.Errorf("create table: %w", err)
		}
	}
	return db.WithContext(ctx).Exec("INSERT INTO stock (sku, available) VALUES (?, ?)", benchSKU, initialStock).Error
}

// newRedisClient returns a client with the options of oncepay's redisx.NewClient: short
// timeouts, a pool of 64, no retries.
func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:          addr,
		DialTimeout:   500 * time.Millisecond,
		ReadTimeout:   500 * time.Millisecond,
		WriteTimeout:  500 * time.Millisecond,
		PoolSize:      64,
		MaxRetries:    -1,
		DialerRetries: 1,
	})
}

// deleteRedisKeys deletes every key matching pattern, a SCAN at a time.
func (e *env) deleteRedisKeys(pattern string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var cursor uint64
	for {
		keys, next, err := e.rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			slog.Error("clean redis", "pattern", pattern, "err", err)
			return
		}
		if len(keys) > 0 {
			if err := e.rdb.Unlink(ctx, keys...).Err(); err != nil && !errors.Is(err, redis.Nil) {
				slog.Error("clean redis", "pattern", pattern, "err", err)
				return
			}
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
