// Package sqliteerr tells the idempotency guard what a SQLite error means, by its extended
// result code, never by its text. It knows no driver: any error with a Code() int method
// carrying SQLite's extended result code (modernc.org/sqlite and github.com/glebarez/go-sqlite
// errors have one) is classified.
//
//	guard := idempotent.New(db, rdb, idempotent.Config{Classify: sqliteerr.Classify})
package sqliteerr

import (
	"errors"

	"github.com/oncepay/oncepay/idempotent/dberr"
)

// SQLite's result codes the guard acts on (https://www.sqlite.org/rescode.html).
const (
	// Busy is SQLITE_BUSY: another connection holds the write lock past the busy timeout.
	Busy = 5
	// Locked is SQLITE_LOCKED: a table lock conflict within one connection's transactions.
	Locked = 6
	// ConstraintUnique is SQLITE_CONSTRAINT_UNIQUE: a unique index refused the row.
	ConstraintUnique = 2067
	// ConstraintPrimaryKey is SQLITE_CONSTRAINT_PRIMARYKEY.
	ConstraintPrimaryKey = 1555
)

// coded is an error that carries SQLite's extended result code.
type coded interface{ Code() int }

// Code returns err's extended result code, and whether err carries one.
func Code(err error) (int, bool) {
	var c coded
	if !errors.As(err, &c) {
		return 0, false
	}
	return c.Code(), true
}

// Classify is idempotent.Config's Classify for SQLite: a unique index is a duplicate key; a
// busy or locked database aborted the attempt, which may run again.
func Classify(err error) dberr.Class {
	code, ok := Code(err)
	if !ok {
		return dberr.Classify(err)
	}
	switch {
	case code == ConstraintUnique, code == ConstraintPrimaryKey:
		return dberr.DuplicateKey
	case code&0xff == Busy, code&0xff == Locked:
		return dberr.Aborted
	}
	return dberr.Other
}
