package mysqlerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/mysqlerr"
)

// TestClassify: by the server's error number, however wrapped; an error of no MySQL driver
// falls back to the default classifier; a text never decides.
func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want idempotent.ErrorClass
	}{
		{fmt.Errorf("insert: %w", &mysql.MySQLError{Number: 1062}), idempotent.ErrorDuplicateKey},
		{&mysql.MySQLError{Number: 1213}, idempotent.ErrorAborted},
		{&mysql.MySQLError{Number: 1205}, idempotent.ErrorLockWait},
		{&mysql.MySQLError{Number: 1064}, idempotent.ErrorOther},
		{fmt.Errorf("%w: %w", gorm.ErrDuplicatedKey, errors.New("x")), idempotent.ErrorDuplicateKey},
		{errors.New("Error 1062 (23000): Duplicate entry"), idempotent.ErrorOther},
	} {
		if got := mysqlerr.Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
