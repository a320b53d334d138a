package testenv

import (
	"encoding/binary"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
)

// Wire is a MySQL protocol proxy that records every command a client sends: one command is
// one round trip (the client waits for its answer before it sends the next), and a
// COM_QUERY carries the SQL text, a multi-statement whole. Tests read it to count a write's
// round trips and to check the order of its statements, on the wire rather than in the code.
type Wire struct {
	mu   sync.Mutex
	cmds map[int][]Command // by client connection, in the order sent
	next int
}

// Command is one command a client sent: its connection and, for a COM_QUERY, its SQL.
type Command struct {
	Conn int
	Code byte   // the command byte: 0x03 COM_QUERY, 0x0e COM_PING, …
	SQL  string // the query text of a COM_QUERY
}

// DBOverWire returns a fresh, migrated MySQL database (as DB) whose connections all go
// through a Wire, and the Wire. It needs a real MySQL.
func DBOverWire(tb testing.TB) (*gorm.DB, *Wire) {
	tb.Helper()
	RequireMySQL(tb)
	_, dsn := DBWithDSN(tb)
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	w := &Wire{cmds: map[int][]Command{}}
	cfg.Addr = w.listen(tb, cfg.Addr)
	db, err := database.Open(database.Options{MySQLDSN: cfg.FormatDSN()})
	if err != nil {
		tb.Fatalf("open through the wire: %v", err)
	}
	tb.Cleanup(func() { _ = database.Close(db) })
	return db, w
}

func (w *Wire) listen(tb testing.TB, upstream string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			w.mu.Lock()
			w.next++
			id := w.next
			w.mu.Unlock()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
			go func() { w.relay(id, c, s); _ = s.Close() }()
		}
	}()
	return ln.Addr().String()
}

// relay copies the client's packets to the server, recording each command: a packet whose
// sequence id is 0 starts one (the handshake's answers carry higher ids).
func (w *Wire) relay(conn int, client io.Reader, server io.Writer) {
	var head [4]byte
	for {
		if _, err := io.ReadFull(client, head[:]); err != nil {
			return
		}
		n := int(binary.LittleEndian.Uint32(append(head[:3:3], 0)))
		body := make([]byte, n)
		if _, err := io.ReadFull(client, body); err != nil {
			return
		}
		if head[3] == 0 && n > 0 && body[0] != 0x01 { // not COM_QUIT
			c := Command{Conn: conn, Code: body[0]}
			if c.Code == 0x03 {
				c.SQL = string(body[1:])
			}
			w.mu.Lock()
			w.cmds[conn] = append(w.cmds[conn], c)
			w.mu.Unlock()
		}
		if _, err := server.Write(append(head[:], body...)); err != nil {
			return
		}
	}
}

// Reset forgets what was recorded so far.
func (w *Wire) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cmds = map[int][]Command{}
}

// Transactions returns the commands of every transaction recorded since the last Reset, each
// from its START TRANSACTION to its COMMIT or ROLLBACK, both included.
func (w *Wire) Transactions() [][]Command {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out [][]Command
	for _, cmds := range w.cmds {
		var cur []Command
		for _, c := range cmds {
			q := strings.ToUpper(strings.TrimSpace(c.SQL))
			switch {
			case strings.HasPrefix(q, "START TRANSACTION"), q == "BEGIN":
				cur = []Command{c}
			case cur != nil:
				cur = append(cur, c)
				if q == "COMMIT" || q == "ROLLBACK" {
					out = append(out, cur)
					cur = nil
				}
			}
		}
	}
	return out
}

// Statements splits the SQL of cmds into statements, in the order the server runs them: a
// multi-statement is split at the driver's separators (";\n", as database.Batch joins them).
func Statements(cmds []Command) []string {
	var out []string
	for _, c := range cmds {
		for _, s := range strings.Split(c.SQL, ";\n") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// Index returns the position of the first statement of stmts that starts with prefix
// (compared without case), or -1.
func Index(stmts []string, prefix string) int {
	return slices.IndexFunc(stmts, func(s string) bool {
		return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
	})
}
