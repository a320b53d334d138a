// Command oncepay-lab is oncepay with the training kit's lab mounted under /lab/
// (ONCEPAY_LAB=true): the naive replicas of the incidents' bugs that tools/drill runs beside the
// real routes. It is the service's binary plus one route hook (tools/lab.Mount); bin/oncepay
// carries no lab route. `make drill` builds and starts it.
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
	slog.InfoContext(ctx, "starting oncepay with the lab", "config", cfg)
	a, err := app.New(ctx, cfg, app.Deps{Routes: lab.Mount})
	if err != nil {
		return err
	}
	defer a.Close()
	return a.Run(ctx, nil)
}
