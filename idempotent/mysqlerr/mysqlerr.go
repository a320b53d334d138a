// Package mysqlerr tells the idempotency guard what a MySQL or MariaDB error means, by the
// server's error number (github.com/go-sql-driver/mysql's MySQLError), never by its text:
//
//	guard := idempotent.New(db, rdb, idempotent.Config{Classify: mysqlerr.Classify})
//
// Without it the guard still recognises its record's duplicate key (the default Classify);
// with it, a deadlock, a Galera certification conflict and a Galera node that is not ready
// are run again (and answered 503 when they last), and a lock wait timeout is answered in
// progress or 503. It holds for a single server and for a MariaDB Galera cluster alike.
package mysqlerr

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/go-sql-driver/mysql"

	"github.com/oncepay/oncepay/idempotent/dberr"
)

// The MySQL and MariaDB error numbers the guard acts on.
const (
	// DupEntry is ER_DUP_ENTRY: a unique index refused the row.
	DupEntry = 1062
	// LockDeadlock is ER_LOCK_DEADLOCK: InnoDB rolled the transaction back to break a
	// deadlock; on Galera also a certification conflict at COMMIT ("Deadlock: wsrep aborted
	// transaction") and a local transaction aborted by a replicated one (a brute-force abort).
	LockDeadlock = 1213
	// LockWaitTimeout is ER_LOCK_WAIT_TIMEOUT: a statement waited innodb_lock_wait_timeout
	// for a row another transaction holds; on Galera also a causal read (wsrep_sync_wait)
	// that timed out.
	LockWaitTimeout = 1205
	// ErrorDuringCommit is ER_ERROR_DURING_COMMIT: on Galera, a node that lost the primary
	// component while it committed ("Got error 6 … during COMMIT"); the transaction was
	// rolled back on this node. Running it again is safe even were it applied elsewhere: the
	// rerun's dedup record meets the committed one.
	ErrorDuringCommit = 1180
	// UnknownComError is ER_UNKNOWN_COM_ERROR, which Galera sends as "WSREP has not yet
	// prepared node for application use": the node is not synced with the primary component
	// (it is joining, donating a snapshot, or partitioned away) and ran nothing.
	UnknownComError = 1047
)

// sqlStateSerialization is SQLSTATE 40001, serialization failure: every MariaDB error that
// says "roll back and run the transaction again" carries it (Galera's "WSREP replication
// failed … retry the query" among them), whatever its number.
const sqlStateSerialization = "40001"

// Classify is idempotent.Config's Classify for MySQL and MariaDB, a Galera cluster included.
func Classify(err error) dberr.Class {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		if connectionLost(err) {
			return dberr.ConnectionLost
		}
		return dberr.Classify(err)
	}
	switch me.Number {
	case DupEntry:
		return dberr.DuplicateKey
	case LockDeadlock, ErrorDuringCommit:
		return dberr.Aborted
	case LockWaitTimeout:
		return dberr.LockWait
	case UnknownComError:
		return dberr.Unavailable
	}
	if string(me.SQLState[:]) == sqlStateSerialization {
		return dberr.Aborted
	}
	return dberr.Other
}

// connectionLost reports whether err is the driver's connection breaking under a statement:
// go-sql-driver's ErrInvalidConn (it closes a connection whose read or write failed),
// database/sql's ErrBadConn, an EOF in the middle of a packet, or a socket error (reset,
// broken pipe, a read that timed out). The statement may or may not have been applied. A
// dial that failed is not one: nothing was sent.
func connectionLost(err error) bool {
	switch {
	case errors.Is(err, mysql.ErrInvalidConn), errors.Is(err, driver.ErrBadConn),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return false // nothing was sent: the server is down or unreachable
	}
	var ne net.Error
	return errors.As(err, &ne)
}
