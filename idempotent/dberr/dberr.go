// Package dberr names what a database error means to the idempotency guard: the classes that
// idempotent.Config.Classify returns. The kit's classifiers for each dialect are
// idempotent/mysqlerr, idempotent/pgerr and idempotent/sqliteerr; a work that must tell its
// own unique key's refusal from other errors asks one of them too:
//
//	if sqliteerr.Classify(err) == dberr.DuplicateKey {
//		return idempotent.Response{}, idempotent.Conflict(err)
//	}
package dberr

import (
	"errors"

	"gorm.io/gorm"
)

// Classify is the guard's default classifier (idempotent.Config.Classify unset): it knows what gorm knows of every dialect — its
// record's duplicate key, which the guard has the database's dialect translate to
// gorm.ErrDuplicatedKey, whatever the gorm.Config — and nothing else. A deadlock is then an
// error like any other, answered 5xx with nothing stored; a dialect's own classifier
// (idempotent/mysqlerr, idempotent/sqliteerr, idempotent/pgerr) also has it run an aborted transaction again.
func Classify(err error) Class {
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return DuplicateKey
	}
	return Other
}

// Class is what a database error means to the guard.
type Class int

// The classes of database errors.
const (
	// Other is any error the guard does not act on.
	Other Class = iota
	// DuplicateKey is a unique-index violation: another attempt holds or committed the key.
	DuplicateKey
	// Aborted is a transaction the database aborted (deadlock, busy file): it left
	// nothing behind and may be run again.
	Aborted
	// LockWait is a statement that waited out the lock wait timeout behind another
	// transaction (on Galera also a causal read, wsrep_sync_wait, that timed out). The
	// guard does not run it again (it would wait as long again): a record's insert that
	// waited is a copy in progress (idempotent.ErrKeyInUse), a work's statement idempotent.ErrUnavailable.
	LockWait
	// Unavailable is a database that refused the transaction for the moment, before
	// anything of it was applied: a Galera node that is not part of the primary component
	// or not yet synced (MariaDB's 1047, "WSREP has not yet prepared node for application
	// use"). The guard runs it again, within idempotent.Config.RetryFor, as it does an aborted one.
	Unavailable
	// ConnectionLost is a connection to the database that broke under a statement of
	// the transaction (not a dial that failed: that is Other, and answered at once):
	// reset, closed, timed out waiting for an answer. Before the COMMIT the server rolls
	// the transaction back; during it the outcome is unknown (the COMMIT may have been
	// applied, its answer lost). The guard asks the record which it was and
	// runs the transaction again, within idempotent.Config.RetryFor, when the record is not there: a
	// commit that was in truth applied makes the rerun's record a duplicate, which the guard
	// knows by the record's id for the call's own commit and answers executed.
	ConnectionLost
)
