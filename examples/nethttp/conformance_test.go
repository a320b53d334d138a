package main

import (
	"testing"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// TestConformance runs the kit's conformance suite on this example's own stack — its
// database with its notes table beside the kit's, and its Redis — as an adopter runs it on
// theirs: one effect per key under a storm, byte-exact replays, 422, 409 with Retry-After,
// reject mode, and the work's own fence after a purge.
func TestConformance(t *testing.T) {
	for _, dialect := range idemtest.Dialects(t) {
		t.Run(dialect, func(t *testing.T) {
			idemtest.Run(t, func(t *testing.T) idemtest.Stack {
				db := idemtest.DB(t, dialect)
				if err := Setup(db); err != nil {
					t.Fatal(err)
				}
				return idemtest.Stack{DB: db, Redis: idemtest.Redis(t), Config: idempotent.Config{Classify: idemtest.Classify(dialect)}}
			})
		})
	}
}
