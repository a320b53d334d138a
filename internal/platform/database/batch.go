package database

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Batch is a planned write: the statements of one use case, held in the order the use case
// lays them out — its new rows, the dedup record, then its contended rows — and sent together
// by Send. On MySQL that is one round trip: one multi-statement whose parameters the driver
// interpolates and escapes (interpolateParams, set by Open), with a SELECT ROW_COUNT() after
// each conditional UPDATE, so that every precondition is still decided by the rows it changed.
// On SQLite, where a statement is a function call and not a round trip, each statement runs
// as it is added and Send reports the first failure. So it does on a MariaDB Galera node
// (KnownGalera): there a transaction that loses a certification conflict is aborted by the
// applier ("brute-force abort") at any point, and MariaDB 10.11 can leave a multi-statement
// aborted that way without the rest of its reply — the driver then waits for it forever. It
// was seen in the Galera tests' hot stock row: 2 of 90 orders hung 60 s, in 2 of 6 runs, each
// in the read of a batch's next result. Statement by statement, an abort is one error reply.
//
// While a Batch is open, every statement that is executed on its transaction's connection is
// held too, whoever executes it: that is how the idempotency kit's dedup record (record, which
// sends its INSERT through tx.Statement.ConnPool) travels in the batch at the place the use
// case calls it. Queries are not held: a read while the batch is open is an error, since it
// would run before the writes that precede it in the code. Send ends the batch; a use case
// that returns early without sending leaves its transaction to be rolled back, as always.
//
// A failed statement stops the batch where it is (the server runs nothing after it) and is
// returned by Send as the driver reported it: a duplicate key keeps its error number, and the
// guard tells the record's duplicate from another by reading the record.
type Batch struct {
	tx     *gorm.DB
	pool   *heldPool
	failed error // SQLite: the first statement that failed
}

// Hold opens a batch on tx, a transaction: from now until Send, tx's statements are held.
func Hold(tx *gorm.DB) *Batch {
	b := &Batch{tx: tx}
	if galera, _ := KnownGalera(tx); DialectOf(tx) == MySQL && !galera {
		b.pool = &heldPool{ConnPool: tx.Statement.ConnPool}
		tx.Statement.ConnPool = b.pool
	}
	return b
}

// Dialect is the dialect of the batch's transaction.
func (b *Batch) Dialect() Dialect { return DialectOf(b.tx) }

// Insert adds the INSERTs of values, each a row or a slice of rows of any table.
func (b *Batch) Insert(ctx context.Context, values ...any) {
	b.insert(ctx, b.tx.Session(&gorm.Session{DryRun: true, NewDB: true}), values)
}

// InsertOrSkip adds the INSERTs of values that a row already holding one of their unique keys
// turns into no-ops (ON DUPLICATE KEY on MySQL, ON CONFLICT DO NOTHING on SQLite).
func (b *Batch) InsertOrSkip(ctx context.Context, values ...any) {
	b.insert(ctx, b.tx.Session(&gorm.Session{DryRun: true, NewDB: true}).Clauses(clause.OnConflict{DoNothing: true}), values)
}

func (b *Batch) insert(ctx context.Context, dry *gorm.DB, values []any) {
	for _, v := range values {
		stmt := dry.Session(&gorm.Session{}).Create(v).Statement
		if stmt.Error != nil {
			b.fail(stmt.Error)
			continue
		}
		b.Exec(ctx, stmt.SQL.String(), stmt.Vars...)
	}
}

// Exec adds one statement whose rows affected do not matter.
func (b *Batch) Exec(ctx context.Context, query string, vars ...any) {
	if b.pool != nil {
		b.pool.hold(query, vars, nil)
		return
	}
	if b.failed == nil {
		_, err := b.tx.Statement.ConnPool.ExecContext(ctx, query, vars...)
		b.fail(err)
	}
}

// Update adds a conditional UPDATE that must change at least one row: when it changes none,
// its precondition was false and Send returns refusal (out of stock, an order that moved on).
func (b *Batch) Update(ctx context.Context, refusal error, query string, vars ...any) {
	if b.pool != nil {
		b.pool.hold(query, vars, refusal)
		return
	}
	if b.failed != nil {
		return
	}
	res, err := b.tx.Statement.ConnPool.ExecContext(ctx, query, vars...)
	if err != nil {
		b.fail(err)
		return
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		b.fail(errors.Join(refusal, err))
	}
}

// UpdateRows adds the conditional UPDATE of cols on model's table where where holds, built by
// gorm as Model(model).Where(where, args...).Updates(cols) would build it: as Update, it must
// change a row, or Send returns refusal.
func (b *Batch) UpdateRows(ctx context.Context, refusal error, model any, cols map[string]any, where string, args ...any) {
	stmt := b.tx.Session(&gorm.Session{DryRun: true, NewDB: true}).Model(model).Where(where, args...).Updates(cols).Statement
	if stmt.Error != nil {
		b.fail(stmt.Error)
		return
	}
	b.Update(ctx, refusal, stmt.SQL.String(), stmt.Vars...)
}

func (b *Batch) fail(err error) {
	if b.failed == nil && err != nil {
		b.failed = err
	}
}

// Send sends the held statements and ends the batch: nil when every statement ran and every
// conditional UPDATE changed a row; the first refusal of an UPDATE that changed none; or the
// error of the statement that failed. On any error the statements before the one that
// failed have run: the caller returns the error, and the transaction is rolled back.
func (b *Batch) Send(ctx context.Context) error {
	if b.pool == nil {
		return b.failed
	}
	b.tx.Statement.ConnPool = b.pool.ConnPool
	if b.failed != nil {
		return b.failed
	}
	return b.pool.send(ctx)
}

// heldPool stands for a transaction's connection while a batch is open: it holds what is
// executed on it, refuses reads, and commits or rolls back the transaction it stands for.
type heldPool struct {
	gorm.ConnPool
	sqls     []string
	vars     []any
	refusals []error // for each SELECT ROW_COUNT() in sqls, in order
}

func (p *heldPool) hold(query string, vars []any, refusal error) {
	p.sqls = append(p.sqls, query)
	p.vars = append(p.vars, vars...)
	if refusal != nil {
		p.sqls = append(p.sqls, "SELECT ROW_COUNT()")
		p.refusals = append(p.refusals, refusal)
	}
}

// ExecContext holds the statement; its result says it changed one row (it is an INSERT: the
// dedup record's), and its real outcome comes with Send.
func (p *heldPool) ExecContext(_ context.Context, query string, vars ...any) (sql.Result, error) {
	p.hold(query, vars, nil)
	return driver.RowsAffected(1), nil
}

var errReadInBatch = errors.New("database: a read while a batch is held; send the batch first")

func (p *heldPool) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, errReadInBatch
}

func (p *heldPool) QueryRowContext(ctx context.Context, _ string, _ ...any) *sql.Row {
	// A *sql.Row cannot be made with an error outside database/sql; a cancelled context
	// makes the transaction's own QueryRowContext return one without sending anything.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	return p.ConnPool.QueryRowContext(cancelled, "SELECT 1")
}

// Commit and Rollback end the transaction the pool stands for, should a use case leave a
// batch open: gorm finds them on the transaction's ConnPool.
func (p *heldPool) Commit() error   { return p.ConnPool.(gorm.TxCommitter).Commit() }
func (p *heldPool) Rollback() error { return p.ConnPool.(gorm.TxCommitter).Rollback() }

// send sends the held statements in one multi-statement and reads the rows changed by each
// conditional UPDATE from the result sets of their SELECT ROW_COUNT()s.
func (p *heldPool) send(ctx context.Context) error {
	if len(p.sqls) == 0 {
		return nil
	}
	query := strings.Join(p.sqls, ";\n")
	if len(p.refusals) == 0 {
		_, err := p.ConnPool.ExecContext(ctx, query, p.vars...)
		return err
	}
	rows, err := p.ConnPool.QueryContext(ctx, query, p.vars...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var refused error
	read := 0
	for i, refusal := range p.refusals {
		if i > 0 && !rows.NextResultSet() {
			break
		}
		if !rows.Next() {
			break
		}
		var n int64
		if err := rows.Scan(&n); err != nil {
			return err
		}
		read++
		if n == 0 && refused == nil {
			refused = refusal
		}
	}
	for rows.NextResultSet() { // a statement after the last count may still fail
	}
	switch err := rows.Err(); {
	case err != nil:
		return err
	case read < len(p.refusals):
		// go-sql-driver reports the statement that stopped a batch; a count that is missing
		// all the same must never read as a precondition that held.
		return fmt.Errorf("database: the batch answered %d of its %d row counts", read, len(p.refusals))
	}
	return refused
}

// Without a Batch: Insert sends a use case's new rows in one round trip, ForUpdate makes a
// read current.

// Insert writes values — each a row or a slice of rows of any table — in tx, in one round
// trip on MySQL (one multi-statement, its parameters interpolated and escaped by the driver)
// and one statement after another on SQLite, where a statement is a function call. A use
// case sends its new, uncontended rows this way before it touches the contended ones, so that
// it holds their locks for as few round trips as possible. Any error leaves tx to be rolled
// back.
func Insert(ctx context.Context, tx *gorm.DB, values ...any) error {
	sqls := make([]string, 0, len(values))
	var vars []any
	for _, v := range values {
		stmt := tx.Session(&gorm.Session{DryRun: true, NewDB: true}).Create(v).Statement
		if stmt.Error != nil {
			return stmt.Error
		}
		if DialectOf(tx) == SQLite {
			if _, err := tx.Statement.ConnPool.ExecContext(ctx, stmt.SQL.String(), stmt.Vars...); err != nil {
				return err
			}
			continue
		}
		sqls = append(sqls, stmt.SQL.String())
		vars = append(vars, stmt.Vars...)
	}
	if len(sqls) == 0 {
		return nil
	}
	_, err := tx.Statement.ConnPool.ExecContext(ctx, strings.Join(sqls, ";\n"), vars...)
	return err
}

// ForUpdate makes db's next query a current, locking read on MySQL (SELECT … FOR UPDATE).
// Under REPEATABLE READ a plain SELECT after a conditional UPDATE that affected 0 rows may
// answer from the transaction's older snapshot; the locking read sees what the UPDATE saw.
// SQLite transactions begin IMMEDIATE, so their plain reads are already current.
func ForUpdate(db *gorm.DB) *gorm.DB {
	if DialectOf(db) == MySQL {
		return db.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	return db
}

// The database's clock: the time instances agree on (Now).

// sqliteNow is SQLite's clock as its strftime writes it, to the millisecond, in UTC.
const sqliteNow = "2006-01-02 15:04:05.000"

// Now returns the database server's clock, in UTC: on MySQL and MariaDB UTC_TIMESTAMP(6), on
// SQLite strftime('now'), which is the clock of the machine the file is on. A decision that
// instances must agree on — has this order expired, is this lease still held — compares
// against it rather than against the instance's own clock (internal/platform/clock), which may
// run minutes off: a close job on an instance ten minutes ahead closed orders ten minutes
// before their expires_at, and a sender ten minutes ahead took over leases still held. db may
// be a transaction; the read is one round trip.
func Now(ctx context.Context, db *gorm.DB) (time.Time, error) {
	conn := db.WithContext(ctx)
	if DialectOf(db) == MySQL {
		var now time.Time
		if err := conn.Raw("SELECT UTC_TIMESTAMP(6)").Scan(&now).Error; err != nil {
			return time.Time{}, fmt.Errorf("the database's clock: %w", err)
		}
		return now.UTC(), nil
	}
	var s string
	if err := conn.Raw("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')").Scan(&s).Error; err != nil {
		return time.Time{}, fmt.Errorf("the database's clock: %w", err)
	}
	now, err := time.ParseInLocation(sqliteNow, s, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("the database's clock: %q: %w", s, err)
	}
	return now, nil
}

// NowSQL is the SQL expression of the database's clock (see Now), for a write that reads it
// in a query it sends anyway rather than in a round trip of its own; scan it into a Clock.
func NowSQL(db *gorm.DB) string {
	if DialectOf(db) == MySQL {
		return "UTC_TIMESTAMP(6)"
	}
	return "strftime('%Y-%m-%d %H:%M:%f', 'now')"
}

// Clock is the database's clock read by NowSQL, in UTC, whichever way the driver hands it
// over: a time.Time (MySQL with parseTime), or SQLite's text.
type Clock struct{ time.Time }

// Scan implements sql.Scanner.
func (c *Clock) Scan(v any) error {
	switch v := v.(type) {
	case time.Time:
		c.Time = v.UTC()
		return nil
	case string:
		return c.parse(v)
	case []byte:
		return c.parse(string(v))
	}
	return fmt.Errorf("the database's clock: cannot read %T", v)
}

func (c *Clock) parse(s string) error {
	// A layout without a fraction parses any fraction the text has (SQLite's milliseconds,
	// MySQL's microseconds when the driver does not parse times).
	t, err := time.ParseInLocation(time.DateTime, s, time.UTC)
	if err != nil {
		return fmt.Errorf("the database's clock: %q: %w", s, err)
	}
	c.Time = t
	return nil
}

// Value implements driver.Valuer, which gorm asks of a struct column's type.
func (c Clock) Value() (driver.Value, error) { return c.Time, nil }
