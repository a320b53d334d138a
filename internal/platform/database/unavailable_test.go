package database_test

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
)

// TestIsUnavailable holds the classifier to the errors a MySQL or MariaDB that is down,
// restarting or unreachable produces, and keeps the errors of a wrong statement or a busy row
// out of it: the first are 503 unavailable, the others keep their own meaning (issue: 503
// not 500).
func TestIsUnavailable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	mysqlErr := func(n uint16, state, msg string) error {
		e := &gomysql.MySQLError{Number: n, Message: msg}
		copy(e.SQLState[:], state)
		return e
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"driver.ErrBadConn", driver.ErrBadConn, true},
		{"driver.ErrBadConn wrapped", fmt.Errorf("create order: %w", driver.ErrBadConn), true},
		{"mysql.ErrInvalidConn", gomysql.ErrInvalidConn, true},
		{"io.EOF from the driver", io.EOF, true},
		{"io.ErrUnexpectedEOF", fmt.Errorf("read packet: %w", io.ErrUnexpectedEOF), true},
		{"sql.ErrConnDone", sql.ErrConnDone, true},
		{"connection refused", refused, true},
		{"connection reset", reset, true},
		{"i/o timeout dialing", dialTimeout, true},
		{"broken pipe", &os.SyscallError{Syscall: "write", Err: syscall.EPIPE}, true},
		{"1053 server shutdown", mysqlErr(1053, "08S01", "Server shutdown in progress"), true},
		{"2006 server has gone away", mysqlErr(2006, "HY000", "MySQL server has gone away"), true},
		{"2013 lost connection", mysqlErr(2013, "HY000", "Lost connection to MySQL server during query"), true},
		{"1927 connection killed (MariaDB)", mysqlErr(1927, "70100", "Connection was killed"), true},
		{"4031 interaction timeout", mysqlErr(4031, "HY000", "The client was disconnected by the server because of inactivity"), true},
		{"SQLSTATE class 08", mysqlErr(9999, "08004", "connection rejected"), true},
		{"text only: bad connection", errors.New("driver: bad connection"), true},
		{"text only: invalid connection", fmt.Errorf("commit: %v", gomysql.ErrInvalidConn), true},
		{"text only: server has gone away", errors.New("Error 2006: MySQL server has gone away"), true},
		{"a duplicate joined with the connection that broke", errors.Join(mysqlErr(1062, "23000", "Duplicate entry"), gomysql.ErrInvalidConn), true},
		{"wrapped, a duplicate beside a refused dial", fmt.Errorf("create order: %w", fmt.Errorf("%w; %w", mysqlErr(1062, "23000", "Duplicate entry"), refused)), true},

		{"nil", nil, false},
		{"1062 duplicate key", mysqlErr(1062, "23000", "Duplicate entry"), false},
		{"1213 deadlock", mysqlErr(1213, "40001", "Deadlock found"), false},
		{"1205 lock wait timeout", mysqlErr(1205, "HY000", "Lock wait timeout exceeded"), false},
		{"1054 unknown column", mysqlErr(1054, "42S22", "Unknown column 'x'"), false},
		{"record not found", gorm.ErrRecordNotFound, false},
		{"no rows", sql.ErrNoRows, false},
		{"sqlite busy", errors.New("database is locked (5) (SQLITE_BUSY)"), false},
		{"unexpected", errors.New("something else went wrong"), false},
		{"joined, none unavailable", errors.Join(mysqlErr(1062, "23000", "Duplicate entry 'broken pipe'"), errors.New("no")), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := database.IsUnavailable(tt.err); got != tt.want {
				t.Errorf("IsUnavailable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestIsUnavailableFromTheDriver checks the classifier on what the real driver answers when
// nothing listens at the database's address, and that the guard is told nothing special
// about it: an unreachable database is ErrorOther to Classify, so the guard returns the error
// and stores no outcome, and a retry with the same key runs the work again.
func TestIsUnavailableFromTheDriver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: every dial is refused

	// gorm pings while it opens: the refused dial is Open's own error.
	db, err := database.Open(database.Options{MySQLDSN: "root@tcp(" + addr + ")/oncepay?timeout=2s"})
	if err == nil {
		_ = database.Close(db)
		t.Fatalf("opening a database at %s succeeded; want a refused dial", addr)
	}
	if !database.IsUnavailable(err) {
		t.Errorf("IsUnavailable(%v) = false, want true", err)
	}
	if database.IsDuplicateKey(err) || database.IsRetryable(err) {
		t.Errorf("%v is a duplicate key or retryable; want neither (returned, never stored)", err)
	}
}
