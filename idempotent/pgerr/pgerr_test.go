package pgerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/pgerr"
)

// TestClassify: by SQLSTATE, on pgx's own error type, however wrapped; a text never decides.
func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want dberr.Class
	}{
		{fmt.Errorf("insert: %w", &pgconn.PgError{Code: "23505"}), dberr.DuplicateKey},
		{&pgconn.PgError{Code: "40P01"}, dberr.Aborted},
		{&pgconn.PgError{Code: "40001"}, dberr.Aborted},
		{&pgconn.PgError{Code: "55P03"}, dberr.LockWait},
		{&pgconn.PgError{Code: "42601"}, dberr.Other},
		{errors.New("ERROR: duplicate key value violates unique constraint (SQLSTATE 23505)"), dberr.Other},
	} {
		if got := pgerr.Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
