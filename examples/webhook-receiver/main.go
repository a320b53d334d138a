package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8089", "listen address")
	path := flag.String("db", "receiver.db", "SQLite file (ignored with -mysql)")
	dsn := flag.String("mysql", "", "MySQL/MariaDB DSN instead of SQLite")
	tolerance := flag.Duration("tolerance", 5*time.Minute, "how far the signed timestamp may lie from this clock")
	noDedup := flag.Bool("no-dedup", false, "skip the dedup record (the naive receiver of I16: a lost 2xx processes the event twice)")
	flag.Parse()

	// The endpoint's secret comes from the environment, never from a flag (a process list
	// shows flags): WEBHOOK_SECRET, comma-separated during a rotation.
	var secrets []string
	for _, s := range strings.Split(os.Getenv("WEBHOOK_SECRET"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			secrets = append(secrets, s)
		}
	}
	if len(secrets) == 0 {
		log.Fatal("set WEBHOOK_SECRET to the secret POST /v1/admin/webhook-endpoints answered")
	}
	dialector := sqlite.Open(*path + "?_pragma=busy_timeout(5000)&_txlock=immediate")
	if *dsn != "" {
		dialector = mysql.Open(*dsn)
	}
	db, err := gorm.Open(dialector, &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	rc, err := New(db, secrets, *tolerance)
	if err != nil {
		log.Fatal(err)
	}
	rc.Dedup = !*noDedup
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks", rc)
	mux.HandleFunc("GET /shipments", rc.ShipmentsHandler)
	log.Printf("webhook receiver on http://%s/webhooks (dedup %v)", *addr, rc.Dedup)
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
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
