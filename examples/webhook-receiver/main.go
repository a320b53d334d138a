package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv("WEBHOOK_SECRET"), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "webhook receiver:", err)
		os.Exit(1)
	}
}

// run is the whole program, so that a test can start it: it binds its address first and only
// then prints where it listens (the address it got, which differs from -addr for a port 0),
// so that the line is a promise a reader can act on. It returns when ctx ends.
func run(ctx context.Context, args []string, secretEnv string, stdout io.Writer) error {
	fs := flag.NewFlagSet("webhook-receiver", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8089", "listen address; port 0 picks a free port, printed at start")
	path := fs.String("db", "receiver.db", "SQLite file (ignored with -mysql)")
	dsn := fs.String("mysql", "", "MySQL/MariaDB DSN instead of SQLite")
	tolerance := fs.Duration("tolerance", 5*time.Minute, "how far the signed timestamp may lie from this clock")
	noDedup := fs.Bool("no-dedup", false, "skip the dedup record (the naive receiver of I16: a lost 2xx processes the event twice)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	// The endpoint's secret comes from the environment, never from a flag (a process list
	// shows flags): WEBHOOK_SECRET, comma-separated during a rotation.
	var secrets []string
	for _, s := range strings.Split(secretEnv, ",") {
		if s = strings.TrimSpace(s); s != "" {
			secrets = append(secrets, s)
		}
	}
	if len(secrets) == 0 {
		return errors.New("set WEBHOOK_SECRET to the secret POST /v1/admin/webhook-endpoints answered")
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%s is already in use (is another receiver still running?): stop it, or pass -addr 127.0.0.1:0 for a free port", *addr)
		}
		return err
	}
	defer ln.Close()

	dialector := sqlite.Open(*path + "?_pragma=busy_timeout(5000)&_txlock=immediate")
	if *dsn != "" {
		dialector = mysql.Open(*dsn)
	}
	db, err := gorm.Open(dialector, &gorm.Config{})
	if err != nil {
		return err
	}
	rc, err := New(db, secrets, *tolerance)
	if err != nil {
		return err
	}
	rc.Dedup = !*noDedup
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks", rc)
	mux.HandleFunc("GET /shipments", rc.ShipmentsHandler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "webhook receiver on http://%s/webhooks (dedup %v)\n", ln.Addr(), rc.Dedup)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	}
}

// ShipmentsHandler lists the shipments, to watch the effect: one per paid order.
func (rc *Receiver) ShipmentsHandler(w http.ResponseWriter, r *http.Request) {
	var list []Shipment
	if err := rc.db.WithContext(r.Context()).Order("id").Find(&list).Error; err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"shipments": list})
}
