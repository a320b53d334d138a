package sqliteerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/sqliteerr"
)

type coded int

func (c coded) Error() string { return fmt.Sprintf("sqlite (%d)", int(c)) }
func (c coded) Code() int     { return int(c) }

// TestClassify: by the extended result code, however wrapped; a text never decides.
func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want dberr.Class
	}{
		{fmt.Errorf("insert: %w", coded(2067)), dberr.DuplicateKey},
		{coded(1555), dberr.DuplicateKey},
		{coded(5), dberr.Aborted},
		{coded(5 | 3<<8), dberr.Aborted},
		{coded(6), dberr.Aborted},
		{coded(275), dberr.Other},
		{errors.New("UNIQUE constraint failed (2067)"), dberr.Other},
	} {
		if got := sqliteerr.Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
