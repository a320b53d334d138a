// Package mysqlerr tells the idempotency guard what a MySQL or MariaDB error means, by the
// server's error number (github.com/go-sql-driver/mysql's MySQLError), never by its text:
//
//	guard := idempotent.New(db, rdb, idempotent.Config{Classify: mysqlerr.Classify})
//
// Without it the guard still recognises its record's duplicate key (the default Classify);
// with it, a deadlock and a lock wait timeout are run again or answered in progress.
package mysqlerr

import (
	"errors"

	"github.com/go-sql-driver/mysql"

	"github.com/oncepay/oncepay/idempotent"
)

// The MySQL and MariaDB error numbers the guard acts on.
const (
	// DupEntry is ER_DUP_ENTRY: a unique index refused the row.
	DupEntry = 1062
	// LockDeadlock is ER_LOCK_DEADLOCK: InnoDB rolled the transaction back to break a
	// deadlock (also a Galera certification conflict).
	LockDeadlock = 1213
	// LockWaitTimeout is ER_LOCK_WAIT_TIMEOUT: a statement waited innodb_lock_wait_timeout
	// for a row another transaction holds.
	LockWaitTimeout = 1205
)

// Classify is idempotent.Config's Classify for MySQL and MariaDB.
func Classify(err error) idempotent.ErrorClass {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return idempotent.Classify(err)
	}
	switch me.Number {
	case DupEntry:
		return idempotent.ErrorDuplicateKey
	case LockDeadlock:
		return idempotent.ErrorAborted
	case LockWaitTimeout:
		return idempotent.ErrorLockWait
	}
	return idempotent.ErrorOther
}
