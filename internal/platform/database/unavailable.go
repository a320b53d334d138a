package database

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"

	gomysql "github.com/go-sql-driver/mysql"
)

// unavailableCodes are the MySQL and MariaDB error numbers that mean the server cannot serve
// the statement right now, whatever the statement: it is shutting down, gone or overloaded.
var unavailableCodes = map[uint16]bool{
	1040: true, // ER_CON_COUNT_ERROR: too many connections
	1047: true, // ER_UNKNOWN_COM_ERROR, Galera's "WSREP has not yet prepared node for application use"
	1053: true, // ER_SERVER_SHUTDOWN: server shutdown in progress
	1077: true, // ER_NORMAL_SHUTDOWN
	1152: true, // ER_ABORTING_CONNECTION
	1158: true, // ER_NET_READ_ERROR
	1159: true, // ER_NET_READ_INTERRUPTED
	1160: true, // ER_NET_ERROR_ON_WRITE
	1161: true, // ER_NET_WRITE_INTERRUPTED
	1317: true, // ER_QUERY_INTERRUPTED: the shutdown interrupted the statement
	1927: true, // ER_CONNECTION_KILLED (MariaDB)
	2002: true, // CR_CONNECTION_ERROR
	2003: true, // CR_CONN_HOST_ERROR
	2006: true, // CR_SERVER_GONE_ERROR: MySQL server has gone away
	2013: true, // CR_SERVER_LOST: lost connection during query
	2055: true, // CR_SERVER_LOST_EXTENDED
	4031: true, // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8): the server closed an idle connection
}

// unavailableErrnos are the socket errors of a database that is down or unreachable.
var unavailableErrnos = []error{
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
	syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN,
}

// unavailableMessages catch the same failures when a layer kept only the text of the error.
var unavailableMessages = []string{
	"connection refused", "connection reset", "broken pipe", "bad connection",
	"invalid connection", "server has gone away", "lost connection to", "shutdown in progress",
	"i/o timeout", "unexpected eof",
}

// IsUnavailable reports whether err says that the database cannot be reached right now —
// connection refused or reset, a broken or invalid connection (driver.ErrBadConn,
// mysql.ErrInvalidConn), an EOF in the middle of a packet, a dial that timed out, a server
// that is shutting down or has gone away (1053, 2006, 2013 …) — rather than that the
// statement is wrong. While the database is down every request that needs it is answered 503
// unavailable with Retry-After instead of 500 internal (issue: 503 not 500): the failure
// belongs to the moment, nothing of the attempt was stored, and the same request succeeds once
// database/sql has reconnected.
//
// A deadlock or a lock wait timeout is not unavailability: IsRetryable and IsLockWaitTimeout
// name those, and the guard runs or answers them itself.
//
// An error that joins several (errors.Join, fmt.Errorf with several %w) is unavailable when
// one of them is: the first MySQL error of the tree — a duplicate key met just before the
// server went away, say — must not hide the connection that broke beside it.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if branches := joined(err); branches != nil {
		return slices.ContainsFunc(branches, IsUnavailable)
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		// SQLSTATE class 08 is "connection exception".
		return unavailableCodes[me.Number] || (me.SQLState[0] == '0' && me.SQLState[1] == '8')
	}
	switch {
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, gomysql.ErrInvalidConn),
		errors.Is(err, sql.ErrConnDone), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	}
	for _, errno := range unavailableErrnos {
		if errors.Is(err, errno) {
			return true
		}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, m := range unavailableMessages {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// joined returns the errors of the first error in err's chain that joins several, or nil
// when the chain joins none.
func joined(err error) []error {
	for err != nil {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			return j.Unwrap()
		}
		err = errors.Unwrap(err)
	}
	return nil
}
