// Command oncepay serves the oncepay API (the default) or, with `migrate`, applies the
// embedded migrations to the configured database and exits.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/logx"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "oncepay:", err)
		os.Exit(1)
	}
}

// run is the whole program, so that it can be tested; it returns instead of exiting.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	logger := logx.New(stderr, slog.LevelInfo)
	slog.SetDefault(logger)

	cfg, err := config.Load()
	if err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	command := "serve"
	if len(args) > 0 {
		command = args[0]
	}
	switch command {
	case "serve":
		return serve(ctx, cfg, stdout)
	case "migrate":
		return migrate(ctx, cfg, stdout)
	default:
		return fmt.Errorf("unknown command %q: use `oncepay` (serve) or `oncepay migrate`", command)
	}
}

func serve(ctx context.Context, cfg config.Config, stdout io.Writer) error {
	slog.InfoContext(ctx, "starting oncepay", "config", cfg)
	a, err := app.New(ctx, cfg, app.Deps{})
	if err != nil {
		return err
	}
	defer a.Close()
	if cfg.SeedDemo {
		printBanner(stdout, cfg, a.Seeded)
	}
	return a.Run(ctx, nil)
}

func migrate(ctx context.Context, cfg config.Config, stdout io.Writer) error {
	db, err := database.Open(database.Options{MySQLDSN: cfg.MySQLDSN, SQLitePath: filepath.Join(cfg.DataDir, "oncepay.db"), WsrepSyncWait: cfg.MySQLWsrepSyncWait})
	if err != nil {
		return err
	}
	defer database.Close(db)
	if err := database.Migrate(ctx, db); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrations applied (%s)\n", database.DialectOf(db))
	return nil
}

// printBanner prints the start-up banner: where the server listens, the demo users' keys as
// far as they may be shown, and a curl to try. The public demo keys, the admin key and the
// channel secret are printed only while both secrets are the public dev-* defaults; a
// configured secret is never printed, not even a prefix of it. On a real database the demo
// users have random keys (app.seedDemo), printed here by the start that made them and never
// again: they are stored only as hashes.
func printBanner(w io.Writer, cfg config.Config, seeded []app.SeededUser) {
	base := "http://localhost" + cfg.HTTPAddr
	if cfg.HTTPAddr != "" && cfg.HTTPAddr[0] != ':' {
		base = "http://" + cfg.HTTPAddr
	}
	fmt.Fprintf(w, "\noncepay is starting on %s with demo data:\n", base)
	names := make([]string, len(app.DemoUsers))
	for i, u := range app.DemoUsers {
		names[i] = u.Name
	}
	switch {
	case !cfg.EmbeddedDB() && len(seeded) == 0:
		fmt.Fprintf(w, "  users %s already have API keys: they were printed once, by the start that made them\n", strings.Join(names, ", "))
	case !cfg.EmbeddedDB():
		for _, u := range seeded {
			fmt.Fprintf(w, "  user %-6s API key %s (random, stored only as its hash: shown this once)\n", u.Name, u.APIKey)
		}
	case cfg.DevSecrets():
		for _, u := range app.DemoUsers {
			fmt.Fprintf(w, "  user %-6s API key %s\n", u.Name, u.APIKey)
		}
	default:
		fmt.Fprintf(w, "  users %s seeded with the public demo keys of docs/contract.md (not printed because the secrets are configured)\n", strings.Join(names, ", "))
	}
	if cfg.DevSecrets() {
		fmt.Fprintf(w, "  admin        key     %s\n", cfg.AdminKey)
		fmt.Fprintf(w, "  channel secret       %s\n", cfg.ChannelSecret)
	} else {
		fmt.Fprintf(w, "  admin key and channel secret: set from ONCEPAY_ADMIN_KEY and ONCEPAY_CHANNEL_SECRET (not shown)\n")
	}
	fmt.Fprintf(w, "\ntry:\n")
	fmt.Fprintf(w, "  curl -s %s/healthz\n", base)
	fmt.Fprintf(w, "  curl -s %s/v1/inventory/SKU-1001\n", base)
	fmt.Fprintf(w, "  curl -s %s/v1/idempotency-policy\n", base)
	if cfg.DevSecrets() && cfg.EmbeddedDB() {
		fmt.Fprintf(w, "  curl -s -X POST -H 'Authorization: Bearer %s' %s/v1/idempotency-tokens\n", app.DemoUsers[0].APIKey, base)
	}
	fmt.Fprintln(w)
}
