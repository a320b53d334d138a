package idemtest_test

import (
	"testing"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// TestConformance runs the conformance suite an adopter runs on their own stack, on every
// dialect this run tests (SQLite always; MariaDB and PostgreSQL when configured, always in
// CI), each check on a fresh database and Redis.
func TestConformance(t *testing.T) {
	for _, dialect := range idemtest.Dialects(t) {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			idemtest.Run(t, func(t *testing.T) idemtest.Stack {
				return idemtest.Stack{
					DB:     idemtest.DB(t, dialect),
					Redis:  idemtest.Redis(t),
					Config: idempotent.Config{Classify: idemtest.Classify(dialect)},
				}
			})
		})
	}
}
