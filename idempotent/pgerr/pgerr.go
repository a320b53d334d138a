// Package pgerr tells the idempotency guard what a PostgreSQL error means, by its SQLSTATE,
// never by its text. It knows no driver: any error with an SQLState() string method (pgx's
// *pgconn.PgError has one) is classified.
//
//	guard := idempotent.New(db, rdb, idempotent.Config{Classify: pgerr.Classify})
package pgerr

import (
	"errors"

	"github.com/oncepay/oncepay/idempotent/dberr"
)

// The SQLSTATEs the guard acts on (https://www.postgresql.org/docs/current/errcodes-appendix.html).
const (
	// UniqueViolation: a unique index refused the row.
	UniqueViolation = "23505"
	// SerializationFailure: a serializable (or repeatable read) transaction could not commit.
	SerializationFailure = "40001"
	// DeadlockDetected: the server rolled the transaction back to break a deadlock.
	DeadlockDetected = "40P01"
	// LockNotAvailable: lock_timeout ran out waiting for a row another transaction holds.
	LockNotAvailable = "55P03"
)

// stated is an error that carries a SQLSTATE.
type stated interface{ SQLState() string }

// Classify is idempotent.Config's Classify for PostgreSQL.
func Classify(err error) dberr.Class {
	var s stated
	if !errors.As(err, &s) {
		return dberr.Classify(err)
	}
	switch s.SQLState() {
	case UniqueViolation:
		return dberr.DuplicateKey
	case SerializationFailure, DeadlockDetected:
		return dberr.Aborted
	case LockNotAvailable:
		return dberr.LockWait
	}
	return dberr.Other
}
