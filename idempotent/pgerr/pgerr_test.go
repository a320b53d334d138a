package pgerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/pgerr"
)

// TestClassify: by SQLSTATE, on pgx's own error type, however wrapped; a text never decides.
func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want idempotent.ErrorClass
	}{
		{fmt.Errorf("insert: %w", &pgconn.PgError{Code: "23505"}), idempotent.ErrorDuplicateKey},
		{&pgconn.PgError{Code: "40P01"}, idempotent.ErrorAborted},
		{&pgconn.PgError{Code: "40001"}, idempotent.ErrorAborted},
		{&pgconn.PgError{Code: "55P03"}, idempotent.ErrorLockWait},
		{&pgconn.PgError{Code: "42601"}, idempotent.ErrorOther},
		{errors.New("ERROR: duplicate key value violates unique constraint (SQLSTATE 23505)"), idempotent.ErrorOther},
	} {
		if got := pgerr.Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
