package sqliteerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/sqliteerr"
)

type coded int

func (c coded) Error() string { return fmt.Sprintf("sqlite (%d)", int(c)) }
func (c coded) Code() int     { return int(c) }

// TestClassify: by the extended result code, however wrapped; a text never decides.
func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want idempotent.ErrorClass
	}{
		{fmt.Errorf("insert: %w", coded(2067)), idempotent.ErrorDuplicateKey},
		{coded(1555), idempotent.ErrorDuplicateKey},
		{coded(5), idempotent.ErrorAborted},
		{coded(5 | 3<<8), idempotent.ErrorAborted},
		{coded(6), idempotent.ErrorAborted},
		{coded(275), idempotent.ErrorOther},
		{errors.New("UNIQUE constraint failed (2067)"), idempotent.ErrorOther},
	} {
		if got := sqliteerr.Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
