// Package database opens oncepay's gorm database — MySQL when a DSN is configured, an embedded
// pure-Go SQLite file otherwise — applies the embedded migrations and translates driver errors
// into sentinels. No transaction travels in a context: a use case receives its transaction
// (*gorm.DB) as an argument, so that a reader sees where it begins and what runs inside it.
package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/glebarez/sqlite"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/migrations"
)

// Dialect names the SQL dialect of an open database.
type Dialect string

const (
	// MySQL is MySQL 8 or MariaDB through go-sql-driver.
	MySQL Dialect = "mysql"
	// SQLite is the embedded pure-Go SQLite file.
	SQLite Dialect = "sqlite"
)

// Options says which database to open.
type Options struct {
	// MySQLDSN is a go-sql-driver DSN; empty selects SQLite.
	MySQLDSN string
	// SQLitePath is the SQLite file used when MySQLDSN is empty.
	SQLitePath string
	// MaxOpenConns bounds the MySQL pool; zero means 50.
	MaxOpenConns int
	// WsrepSyncWait, when not zero and the server is a MariaDB Galera node, is the
	// wsrep_sync_wait bitmask every connection of the pool sets (1: BEGIN and reads wait
	// for the node to apply what the cluster committed before them). A DSN that sets
	// wsrep_sync_wait itself keeps its own. See GaleraParams.
	WsrepSyncWait int
}

// Open opens the database described by opts. It does not migrate.
func Open(opts Options) (*gorm.DB, error) {
	cfg := &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		NowFunc:                clock.Now,
		TranslateError:         false,
	}
	var (
		dialector gorm.Dialector
		galera    *bool // whether the server is a Galera node, when Open asked it
	)
	if opts.MySQLDSN != "" {
		dsn, err := normalizeMySQLDSN(opts.MySQLDSN)
		if err != nil {
			return nil, err
		}
		if dsn, galera, err = withGaleraParams(dsn, opts.WsrepSyncWait); err != nil {
			return nil, err
		}
		// No INSERT … RETURNING on MariaDB: every id is a snowflake set before the insert,
		// and with RETURNING gorm counts returned rows as affected ones (an ON DUPLICATE KEY
		// no-op would look like an insert).
		dialector = mysql.New(mysql.Config{DSN: dsn, DisableWithReturning: true})
	} else {
		if err := os.MkdirAll(filepath.Dir(opts.SQLitePath), 0o755); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
		// WAL lets readers run beside the writer; _txlock=immediate takes the write lock at
		// BEGIN so two writers queue on busy_timeout instead of failing to upgrade a read lock.
		// No _time_format: glebarez/go-sqlite v1.21 stops reading parameters after it, which
		// silently dropped _txlock; its default write format is already the "sqlite" one.
		dsn := "file:" + opts.SQLitePath + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)" +
			"&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
		dialector = sqlite.Open(dsn)
	}
	db, err := gorm.Open(dialector, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	if galera != nil {
		galeraOf.Store(sqlDB, *galera)
	}
	if opts.MySQLDSN != "" {
		n := opts.MaxOpenConns
		if n == 0 {
			n = 50
		}
		sqlDB.SetMaxOpenConns(n)
		sqlDB.SetMaxIdleConns(n)
		sqlDB.SetConnMaxLifetime(30 * time.Minute)
	} else {
		// One writer at a time is SQLite's nature; a small pool keeps readers concurrent.
		sqlDB.SetMaxOpenConns(8)
	}
	return db, nil
}

// normalizeMySQLDSN makes sure times are parsed as UTC time.Time values.
func normalizeMySQLDSN(dsn string) (string, error) {
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("ONCEPAY_MYSQL_DSN: %w", err)
	}
	c.ParseTime = true
	c.Loc = time.UTC
	// Interpolate parameters client-side: without it every parameterised statement costs a
	// prepare and a close round trip besides its execution, which doubled the price of the
	// dedup record on every write.
	c.InterpolateParams = true
	// Several INSERTs of one use case may travel as one multi-statement (see Insert); the
	// parameters are interpolated and escaped by the driver, never concatenated by hand.
	c.MultiStatements = true
	if c.Params == nil {
		c.Params = map[string]string{}
	}
	if _, ok := c.Params["time_zone"]; !ok {
		c.Params["time_zone"] = "'+00:00'"
	}
	return c.FormatDSN(), nil
}

// withGaleraParams adds wsrep_sync_wait=syncWait to dsn's session variables when the server
// it names is a Galera node (IsGalera) and dsn does not set the variable itself; syncWait 0
// leaves dsn as it is. go-sql-driver sends every unknown DSN parameter as a SET on each new
// connection, so the whole pool reads causally (I1 on a cluster: a report on one node right
// after its order committed on another must not find "no such order").
// It also returns whether the server is a Galera node when it asked (nil when it did not).
func withGaleraParams(dsn string, syncWait int) (string, *bool, error) {
	if syncWait == 0 {
		return dsn, nil, nil
	}
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", nil, err
	}
	if _, set := c.Params["wsrep_sync_wait"]; set {
		return dsn, nil, nil
	}
	probe, err := sql.Open("mysql", dsn)
	if err != nil {
		return "", nil, err
	}
	defer probe.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	galera, err := IsGalera(ctx, probe)
	if err != nil {
		return "", nil, fmt.Errorf("ask the MySQL server whether it is a Galera node: %w", err)
	}
	if !galera {
		return dsn, &galera, nil
	}
	c.Params["wsrep_sync_wait"] = fmt.Sprint(syncWait)
	return c.FormatDSN(), &galera, nil
}

// galeraOf holds, by pool, whether Open found the server to be a Galera node.
var galeraOf sync.Map // *sql.DB → bool

// KnownGalera reports whether db's server is a Galera node, if Open already asked it (known
// false when it did not: the caller asks IsGalera itself), so that the start-up asks once.
func KnownGalera(db *gorm.DB) (galera, known bool) {
	sqlDB, err := db.DB()
	if err != nil {
		return false, false
	}
	v, ok := galeraOf.Load(sqlDB)
	if !ok {
		return false, false
	}
	return v.(bool), true
}

// IsGalera reports whether the server db reaches is a MariaDB Galera node: wsrep_on is ON,
// or the server answers with Galera's "WSREP has not yet prepared node" (1047). A server
// without the variable (MySQL, a MariaDB built without wsrep) is not one.
func IsGalera(ctx context.Context, db *sql.DB) (bool, error) {
	var on sql.NullInt64
	err := db.QueryRowContext(ctx, "SELECT @@global.wsrep_on").Scan(&on)
	var me *gomysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1047:
		return true, nil
	case errors.As(err, &me) && me.Number == 1193: // ER_UNKNOWN_SYSTEM_VARIABLE
		return false, nil
	case err != nil:
		return false, err
	}
	return on.Valid && on.Int64 == 1, nil
}

// DialectOf reports the dialect of db.
func DialectOf(db *gorm.DB) Dialect {
	if db.Dialector.Name() == "mysql" {
		return MySQL
	}
	return SQLite
}

// Migrate applies the embedded migrations of db's dialect.
func Migrate(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return migrateSQL(ctx, sqlDB, DialectOf(db))
}

func migrateSQL(ctx context.Context, sqlDB *sql.DB, d Dialect) error {
	var (
		fsys    fs.FS
		dialect goose.Dialect
		err     error
	)
	switch d {
	case MySQL:
		dialect = goose.DialectMySQL
		fsys, err = fs.Sub(migrations.MySQL, "mysql")
	default:
		dialect = goose.DialectSQLite3
		fsys, err = fs.Sub(migrations.SQLite, "sqlite")
	}
	if err != nil {
		return err
	}
	provider, err := goose.NewProvider(dialect, sqlDB, fsys)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// ErrDuplicateKey means an INSERT hit a unique index: another attempt got there first.
var ErrDuplicateKey = errors.New("duplicate key")

// ErrRetryable means the database aborted the transaction (deadlock, a Galera certification
// conflict, lock wait timeout, busy SQLite file); the whole transaction may be run again.
var ErrRetryable = errors.New("transaction aborted by the database; retry")

// Translate turns driver errors into ErrDuplicateKey or ErrRetryable, wrapping the original.
// Every other error is returned unchanged. Nothing above a store should see a driver error.
func Translate(err error) error {
	if err == nil {
		return nil
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1062:
			return fmt.Errorf("%w: %w", ErrDuplicateKey, err)
		case 1213, 1205, 1180:
			// 1180 is Galera's "Got error … during COMMIT": the node lost the primary
			// component while committing and rolled the transaction back.
			return fmt.Errorf("%w: %w", ErrRetryable, err)
		}
		if string(me.SQLState[:]) == "40001" { // serialization failure: run it again
			return fmt.Errorf("%w: %w", ErrRetryable, err)
		}
		return err
	}
	if code, ok := sqliteCode(err); ok {
		switch {
		case code == sqliteConstraintUnique, code == sqliteConstraintPrimaryKey:
			return fmt.Errorf("%w: %w", ErrDuplicateKey, err)
		case code&0xff == sqliteBusy, code&0xff == sqliteLocked:
			return fmt.Errorf("%w: %w", ErrRetryable, err)
		}
	}
	return err
}

// SQLite's extended result codes that Translate acts on (https://www.sqlite.org/rescode.html).
const (
	sqliteBusy                 = 5
	sqliteLocked               = 6
	sqliteConstraintPrimaryKey = 1555
	sqliteConstraintUnique     = 2067
)

// sqliteCode returns the extended result code a SQLite driver's error carries (its Code()
// method: modernc.org/sqlite, github.com/glebarez/go-sqlite), and whether err has one.
func sqliteCode(err error) (int, bool) {
	var coded interface{ Code() int }
	if !errors.As(err, &coded) {
		return 0, false
	}
	return coded.Code(), true
}

// IsDuplicateKey reports whether err is (or translates to) a unique-index violation.
func IsDuplicateKey(err error) bool { return errors.Is(Translate(err), ErrDuplicateKey) }

// IsLockWaitTimeout reports whether err is MySQL's lock wait timeout (1205): a statement
// waited innodb_lock_wait_timeout for a row another transaction still holds.
func IsLockWaitTimeout(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == 1205
}

// IsRetryable reports whether err is (or translates to) a transaction the database aborted.
func IsRetryable(err error) bool { return errors.Is(Translate(err), ErrRetryable) }

// Ping checks that the database answers.
func Ping(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

// Close closes db's pool.
func Close(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}
