// Command oncepay-lab is oncepay with the training kit's hooks: the naive replicas of the
// incidents' bugs under /lab/ (ONCEPAY_LAB=true), which tools/drill runs beside the real
// routes, and the faults of the drill and the chaos run (ONCEPAY_CHAOS_*). It is the
// service's binary plus tools/lab's Settings, which it reads beside the service's
// configuration and hands app.New as Deps; bin/oncepay reads none of them and carries no lab
// route. `make drill` and `make chaos` build and start it.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/platform/logx"
	"github.com/oncepay/oncepay/tools/lab"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "oncepay-lab:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	slog.SetDefault(logx.New(os.Stderr, slog.LevelInfo))
	cfg, err := config.Load()
	if err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	settings, err := lab.LoadSettings()
	if err != nil {
		return fmt.Errorf("invalid lab settings: %w", err)
	}
	slog.InfoContext(ctx, "starting oncepay with the training kit's hooks", "config", cfg, "lab", settings)
	settings.Apply(ctx)
	a, err := app.New(ctx, cfg, settings.Deps())
	if err != nil {
		return err
	}
	defer a.Close()
	return a.Run(ctx, nil)
}
