package mysqlerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/mysqlerr"
)

// TestClassify: by the server's error number, however wrapped; an error of no MySQL driver
// falls back to the default classifier; a text never decides.
func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want dberr.Class
	}{
		{fmt.Errorf("insert: %w", &mysql.MySQLError{Number: 1062}), dberr.DuplicateKey},
		{&mysql.MySQLError{Number: 1213}, dberr.Aborted},
		{&mysql.MySQLError{Number: 1205}, dberr.LockWait},
		// Galera (issue 21): a certification conflict is 1213 ("Deadlock: wsrep aborted
		// transaction"); a node that lost the primary component while committing, 1180; a
		// node not synced, 1047; any serialization failure (SQLSTATE 40001) is run again.
		{fmt.Errorf("commit: %w", &mysql.MySQLError{Number: 1213, SQLState: [5]byte{'4', '0', '0', '0', '1'}, Message: "Deadlock: wsrep aborted transaction"}), dberr.Aborted},
		{&mysql.MySQLError{Number: 1180, Message: "Got error 6 \"No such device or address\" during COMMIT"}, dberr.Aborted},
		{&mysql.MySQLError{Number: 1047, SQLState: [5]byte{'0', '8', 'S', '0', '1'}, Message: "WSREP has not yet prepared node for application use"}, dberr.Unavailable},
		{&mysql.MySQLError{Number: 9999, SQLState: [5]byte{'4', '0', '0', '0', '1'}}, dberr.Aborted},
		{&mysql.MySQLError{Number: 1064, SQLState: [5]byte{'4', '2', '0', '0', '0'}}, dberr.Other},
		{&mysql.MySQLError{Number: 1064}, dberr.Other},
		{fmt.Errorf("%w: %w", gorm.ErrDuplicatedKey, errors.New("x")), dberr.DuplicateKey},
		{errors.New("Error 1062 (23000): Duplicate entry"), dberr.Other},
	} {
		if got := mysqlerr.Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
