package database_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/internal/platform/database"
)

// TestMigrationsMatchTheGuardsSchema holds oncepay's migrations to the one definition of the
// dedup table, idempotent.Schema: the DDL the core publishes is created beside the migrated
// table, in the same database, and both must have the same columns (types, nullability,
// defaults) and indexes. Byte-exact keys (VARBINARY on MySQL) are part of that.
func TestMigrationsMatchTheGuardsSchema(t *testing.T) {
	for name, open := range map[string]func(*testing.T) *gorm.DB{"sqlite": openSQLite, "mysql": openMySQL} {
		t.Run(name, func(t *testing.T) {
			db := open(t)
			ddl := idempotent.Schema[string(database.DialectOf(db))]
			ddl = strings.NewReplacer("idempotency_records", "schema_check",
				"uk_idempotency_key", "uk_schema_check", "idx_idempotency_created", "idx_schema_check").Replace(ddl)
			if err := db.Exec(ddl).Error; err != nil {
				t.Fatalf("create the guard's table: %v", err)
			}
			migrated, published := describe(t, db, "idempotency_records"), describe(t, db, "schema_check")
			if !reflect.DeepEqual(migrated.columns, published.columns) {
				t.Errorf("columns differ:\nmigrations %v\nidempotent.Schema %v", migrated.columns, published.columns)
			}
			if !reflect.DeepEqual(migrated.indexes, published.indexes) {
				t.Errorf("indexes differ:\nmigrations %v\nidempotent.Schema %v", migrated.indexes, published.indexes)
			}
		})
	}
}

// described is a table's columns and indexes as its dialect's catalog reports them, with the
// index names left out (they must differ between two tables of one database).
type described struct {
	columns []string
	indexes []string
}

func describe(t *testing.T, db *gorm.DB, table string) described {
	t.Helper()
	var d described
	if database.DialectOf(db) == database.MySQL {
		var cols []struct{ Name, Type, Nullable, Def string }
		mustQuery(t, db.Raw(`SELECT column_name AS name, column_type AS type, is_nullable AS nullable,
			COALESCE(column_default, '') AS def FROM information_schema.columns
			WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position`, table), &cols)
		for _, c := range cols {
			d.columns = append(d.columns, fmt.Sprintf("%s %s null=%s default=%s", c.Name, c.Type, c.Nullable, c.Def))
		}
		var ix []struct {
			Index     string
			NonUnique int
			Cols      string
		}
		mustQuery(t, db.Raw(`SELECT index_name AS `+"`index`"+`, MIN(non_unique) AS non_unique,
			GROUP_CONCAT(column_name ORDER BY seq_in_index) AS cols FROM information_schema.statistics
			WHERE table_schema = DATABASE() AND table_name = ? GROUP BY index_name ORDER BY cols`, table), &ix)
		for _, i := range ix {
			d.indexes = append(d.indexes, fmt.Sprintf("unique=%v (%s)", i.NonUnique == 0, i.Cols))
		}
		return d
	}
	var cols []struct {
		Name, Type string
		Notnull    int
		Dflt       *string
		Pk         int
	}
	mustQuery(t, db.Raw(`SELECT name, type, "notnull", dflt_value AS dflt, pk FROM pragma_table_info(?) ORDER BY cid`, table), &cols)
	for _, c := range cols {
		def := ""
		if c.Dflt != nil {
			def = *c.Dflt
		}
		d.columns = append(d.columns, fmt.Sprintf("%s %s notnull=%d default=%s pk=%d", c.Name, c.Type, c.Notnull, def, c.Pk))
	}
	var ix []struct {
		Name   string
		Unique int
	}
	mustQuery(t, db.Raw(`SELECT name, "unique" FROM pragma_index_list(?)`, table), &ix)
	for _, i := range ix {
		var names []string
		mustQuery(t, db.Raw(`SELECT name FROM pragma_index_info(?) ORDER BY seqno`, i.Name), &names)
		d.indexes = append(d.indexes, fmt.Sprintf("unique=%v (%s)", i.Unique == 1, strings.Join(names, ",")))
	}
	slices.Sort(d.indexes)
	return d
}
