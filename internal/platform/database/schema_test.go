package database_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// gooseTable is goose's bookkeeping table, which only one side may be expected to share.
const gooseTable = "goose_db_version"

// primaryKey is the name under which a table's primary key is recorded: MySQL's own name for
// it, given to SQLite's too, whose primary key has no index name when it aliases the rowid.
const primaryKey = "PRIMARY"

// schema is what the two dialects' migrations must agree on: per table, its column names and
// its unique indexes (the primary key included) with their ordered columns. Types are left
// out on purpose: SQLite has type affinities, not MySQL's types.
type schema map[string]table

type table struct {
	columns []string            // Sorted.
	unique  map[string][]string // Index name → columns in index order.
}

// openSQLite returns a fresh, migrated SQLite database in a temporary directory, whatever
// ONCEPAY_TEST_MYSQL_DSN says: the schema test needs both dialects side by side.
func openSQLite(t *testing.T) *gorm.DB {
	t.Helper()
	db, err := database.Open(database.Options{SQLitePath: filepath.Join(t.TempDir(), "oncepay.db")})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = database.Close(db) })
	if err := database.Migrate(context.Background(), db); err != nil {
		t.Fatalf("migrate sqlite: %v", err)
	}
	return db
}

// openMySQL returns a fresh, migrated MySQL database, skipping the test when none is
// configured (failing it when CI=true).
func openMySQL(t *testing.T) *gorm.DB {
	t.Helper()
	testenv.RequireMySQL(t)
	db := testenv.DB(t)
	if d := database.DialectOf(db); d != database.MySQL {
		t.Fatalf("testenv.DB returned %s with %s set", d, testenv.EnvMySQLDSN)
	}
	return db
}

// readSchema reads the schema of db in its own dialect's catalog.
func readSchema(t *testing.T, db *gorm.DB) schema {
	t.Helper()
	if database.DialectOf(db) == database.MySQL {
		return readMySQLSchema(t, db)
	}
	return readSQLiteSchema(t, db)
}

// readMySQLSchema reads information_schema for the current database.
func readMySQLSchema(t *testing.T, db *gorm.DB) schema {
	t.Helper()
	s := schema{}
	var tables []string
	mustQuery(t, db.Raw(`SELECT table_name FROM information_schema.tables
		WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'`), &tables)
	for _, name := range tables {
		if name != gooseTable {
			s[name] = table{unique: map[string][]string{}}
		}
	}

	var columns []struct{ Table, Column string }
	mustQuery(t, db.Raw(`SELECT table_name AS `+"`table`"+`, column_name AS `+"`column`"+`
		FROM information_schema.columns WHERE table_schema = DATABASE()`), &columns)
	for _, c := range columns {
		if tb, ok := s[c.Table]; ok {
			tb.columns = append(tb.columns, c.Column)
			s[c.Table] = tb
		}
	}

	// PRIMARY is the primary key; every other non_unique = 0 row is a unique index.
	var parts []struct{ Table, Index, Column string }
	mustQuery(t, db.Raw(`SELECT table_name AS `+"`table`"+`, index_name AS `+"`index`"+`, column_name AS `+"`column`"+`
		FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND non_unique = 0
		ORDER BY table_name, index_name, seq_in_index`), &parts)
	for _, p := range parts {
		if tb, ok := s[p.Table]; ok {
			tb.unique[p.Index] = append(tb.unique[p.Index], p.Column)
		}
	}
	return s.sorted()
}

// readSQLiteSchema reads sqlite_master and the table_info, index_list and index_info pragmas.
func readSQLiteSchema(t *testing.T, db *gorm.DB) schema {
	t.Helper()
	s := schema{}
	var tables []string
	mustQuery(t, db.Raw(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`), &tables)
	for _, name := range tables {
		if name == gooseTable {
			continue
		}
		tb := table{unique: map[string][]string{}}

		var columns []struct {
			Name string
			PK   int
		}
		mustQuery(t, db.Raw(`SELECT name, pk FROM pragma_table_info(?) ORDER BY cid`, name), &columns)
		pk := map[int]string{}
		for _, c := range columns {
			tb.columns = append(tb.columns, c.Name)
			if c.PK > 0 {
				pk[c.PK] = c.Name
			}
		}
		for i := 1; i <= len(pk); i++ {
			tb.unique[primaryKey] = append(tb.unique[primaryKey], pk[i])
		}

		// origin "pk" is the automatic index behind a non-rowid primary key, already
		// recorded above from table_info; "c" (CREATE UNIQUE INDEX) and "u" (a UNIQUE
		// constraint) are unique indexes.
		var indexes []struct {
			Name   string
			Unique int
			Origin string
		}
		mustQuery(t, db.Raw(`SELECT name, "unique", origin FROM pragma_index_list(?)`, name), &indexes)
		for _, ix := range indexes {
			if ix.Unique != 1 || ix.Origin == "pk" {
				continue
			}
			var cols []string
			mustQuery(t, db.Raw(`SELECT name FROM pragma_index_info(?) ORDER BY seqno`, ix.Name), &cols)
			tb.unique[ix.Name] = cols
		}
		s[name] = tb
	}
	return s.sorted()
}

// mustQuery runs q and scans its rows into dest, failing the test on error.
func mustQuery(t *testing.T, q *gorm.DB, dest any) {
	t.Helper()
	if err := q.Scan(dest).Error; err != nil {
		t.Fatalf("query %s: %v", q.Statement.SQL.String(), err)
	}
}

// sorted sorts every table's column names so that two schemas compare regardless of order.
func (s schema) sorted() schema {
	for _, tb := range s {
		sort.Strings(tb.columns)
	}
	return s
}

// diff lists every difference between a (named an) and b (named bn), one per line, sorted;
// an empty result means the two schemas agree.
func diff(an string, a schema, bn string, b schema) []string {
	var out []string
	for name, ta := range a {
		tb, ok := b[name]
		if !ok {
			out = append(out, fmt.Sprintf("table %s: only in %s", name, an))
			continue
		}
		out = append(out, diffSet(fmt.Sprintf("table %s column", name), an, ta.columns, bn, tb.columns)...)
		for ix, ca := range ta.unique {
			cb, ok := tb.unique[ix]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("table %s unique index %s (%s): only in %s", name, ix, strings.Join(ca, ", "), an))
			case !slices.Equal(ca, cb):
				out = append(out, fmt.Sprintf("table %s unique index %s: %s has (%s), %s has (%s)", name, ix, an, strings.Join(ca, ", "), bn, strings.Join(cb, ", ")))
			}
		}
		for ix, cb := range tb.unique {
			if _, ok := ta.unique[ix]; !ok {
				out = append(out, fmt.Sprintf("table %s unique index %s (%s): only in %s", name, ix, strings.Join(cb, ", "), bn))
			}
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			out = append(out, fmt.Sprintf("table %s: only in %s", name, bn))
		}
	}
	sort.Strings(out)
	return out
}

// diffSet lists the members of one sorted list missing from the other.
func diffSet(what, an string, a []string, bn string, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, fmt.Sprintf("%s %s: only in %s", what, x, an))
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			out = append(out, fmt.Sprintf("%s %s: only in %s", what, x, bn))
		}
	}
	return out
}

// TestMigrationsAgree migrates a MySQL and a SQLite database and checks that both end with
// exactly the same tables, columns and unique indexes. A unique index missing on one side
// would let that dialect accept the duplicate the other refuses (I3, I5).
func TestMigrationsAgree(t *testing.T) {
	mysqlDB := openMySQL(t)
	sqliteDB := openSQLite(t)
	my, lite := readSchema(t, mysqlDB), readSchema(t, sqliteDB)
	checkKnownSchema(t, my)
	for _, d := range diff("mysql", my, "sqlite", lite) {
		t.Error(d)
	}
}

// TestSQLiteSchemaReader checks the SQLite reader on what the migrations promise.
func TestSQLiteSchemaReader(t *testing.T) {
	checkKnownSchema(t, readSchema(t, openSQLite(t)))
}

// checkKnownSchema checks a schema read from either dialect against facts the migrations
// promise, so that the comparison cannot pass by misreading both sides the same way.
func checkKnownSchema(t *testing.T, s schema) {
	t.Helper()
	if _, ok := s[gooseTable]; ok {
		t.Errorf("%s was not ignored", gooseTable)
	}
	tests := []struct {
		table, index string
		columns      []string
	}{
		{"users", primaryKey, []string{"id"}},
		{"users", "uk_users_name", []string{"name"}},
		{"api_keys", primaryKey, []string{"key_hash"}},
		{"order_items", primaryKey, []string{"order_id", "sku"}},
		{"inventory_movements", "uk_inventory_movements", []string{"order_id", "sku", "kind"}},
		{"idempotency_records", "uk_idempotency_key", []string{"scope", "biz_type", "biz_key"}},
		{"payments", "uk_payments_trade", []string{"channel", "trade_no"}},
	}
	for _, tt := range tests {
		if got := s[tt.table].unique[tt.index]; !slices.Equal(got, tt.columns) {
			t.Errorf("%s unique %s = %v, want %v", tt.table, tt.index, got, tt.columns)
		}
	}
	if _, ok := s["orders"].unique["idx_orders_user"]; ok {
		t.Error("the non-unique index idx_orders_user was read as unique")
	}
	if got, want := s["inventory"].columns, []string{"available", "name", "price", "reserved", "sku", "sold", "updated_at", "version"}; !slices.Equal(got, want) {
		t.Errorf("inventory columns = %v, want %v", got, want)
	}
}

// TestSchemaDiffReportsDrift changes one SQLite database the way a forgotten migration
// would and checks that the comparison reports each change.
func TestSchemaDiffReportsDrift(t *testing.T) {
	base := readSchema(t, openSQLite(t))
	drifted := openSQLite(t)
	for _, stmt := range []string{
		`CREATE UNIQUE INDEX uk_orders_trade ON orders (channel, trade_no)`,
		`ALTER TABLE users ADD COLUMN email VARCHAR(255) NULL`,
		`DROP INDEX uk_anomalies_trade`,
		`CREATE UNIQUE INDEX uk_anomalies_trade ON anomalies (channel, trade_no, kind)`,
		`CREATE TABLE refund_notes (id INTEGER NOT NULL PRIMARY KEY)`,
	} {
		if err := drifted.Exec(stmt).Error; err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	got := diff("base", base, "drifted", readSchema(t, drifted))
	want := []string{
		"table anomalies unique index uk_anomalies_trade: base has (kind, channel, space, trade_no), drifted has (channel, trade_no, kind)",
		"table orders unique index uk_orders_trade (channel, trade_no): only in drifted",
		"table refund_notes: only in drifted",
		"table users column email: only in drifted",
	}
	if !slices.Equal(got, want) {
		t.Errorf("diff =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
