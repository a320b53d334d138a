package database_test

import (
	"strings"
	"testing"
)

// TestKeyColumnsAreByteExact reads the migrated MySQL schema from information_schema and
// holds docs/contract.md's byte-exact keys on every table, without a list of them: each
// column of a string type in a primary or unique key — idempotency keys, tokens, SKUs,
// channel + trade number, refund numbers, user names, ledger facts, and the values oncepay
// chooses itself, so that the rule has no exception for a new table to fall into — must
// compare bytes: VARBINARY, BINARY, a BLOB, or a binary collation. MySQL's default collation
// ignores case and trailing spaces, so a new table with a VARCHAR key would take `CaseKey-1`
// and `casekey-1` for one key (migration 00002 tells how that happened), while SQLite, Redis
// and the guard keep them apart. Plain indexes are left out: they hold states (orders.status)
// that the server writes and compares as constants, and are no key.
func TestKeyColumnsAreByteExact(t *testing.T) {
	db := openMySQL(t)
	var cols []struct {
		Table, Column, DataType, Collation, Indexes string
	}
	mustQuery(t, db.Raw(`SELECT c.table_name AS `+"`table`"+`, c.column_name AS `+"`column`"+`,
			c.data_type AS data_type, COALESCE(c.collation_name, '') AS collation,
			GROUP_CONCAT(DISTINCT s.index_name ORDER BY s.index_name) AS indexes
		FROM information_schema.columns c
		JOIN information_schema.statistics s ON s.table_schema = c.table_schema
			AND s.table_name = c.table_name AND s.column_name = c.column_name AND s.non_unique = 0
		WHERE c.table_schema = DATABASE() AND c.table_name <> ?
		GROUP BY c.table_name, c.column_name, c.data_type, c.collation_name
		ORDER BY c.table_name, c.column_name`, gooseTable), &cols)
	var checked []string
	for _, c := range cols {
		switch strings.ToLower(c.DataType) {
		case "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set":
		case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
			checked = append(checked, c.Table+"."+c.Column) // bytes: held
			continue
		default:
			continue // numbers and times compare exactly
		}
		checked = append(checked, c.Table+"."+c.Column)
		if !strings.HasSuffix(strings.ToLower(c.Collation), "_bin") {
			t.Errorf("%s.%s is %s with collation %s, in index %s: a key column must compare byte for byte (VARBINARY on MySQL, see migrations/mysql/00002_byte_exact_keys.sql and docs/add-a-write.md)",
				c.Table, c.Column, strings.ToUpper(c.DataType), c.Collation, c.Indexes)
		}
	}
	if len(checked) < 10 {
		t.Fatalf("information_schema names %d string columns in primary or unique keys (%v): the query is wrong", len(checked), checked)
	}
	t.Logf("%d columns in primary or unique keys, %d of a string type", len(cols), len(checked))
}
