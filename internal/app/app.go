// Package app wires oncepay together by hand: configuration, database, Redis, Kafka, the
// domain packages, the HTTP router and the background loops, in readable blocks. It is the
// only package that knows every other one.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/idemops"
	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/channel"
	"github.com/oncepay/oncepay/internal/channelsim"
	"github.com/oncepay/oncepay/internal/config"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/jobs"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/keyring"
	"github.com/oncepay/oncepay/internal/platform/redisx"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/webhook"
)

// Runner is a background loop (consumer, outbox relay, scheduled job) that runs until its
// context ends and then returns, having finished the work in hand.
type Runner interface {
	Run(ctx context.Context) error
}

// App is one running oncepay instance.
type App struct {
	Config   config.Config
	DB       *gorm.DB
	Redis    *redisx.Conn
	Kafka    *kafka.Cluster
	IDs      *ids.Generator
	Registry *prometheus.Registry
	// Channel is the embedded channel simulator, nil when ONCEPAY_CHANNEL_URL is set.
	Channel *channelsim.Sim
	// ChannelURL is the base URL of the payment channel oncepay calls.
	ChannelURL string

	// Guard is the idempotency layer every forced-idempotent write goes through.
	Guard *idempotent.Guard
	// Reports is the inbound port of channel reports.
	Reports *notify.Port
	// idem and adminIdem are the kit's HTTP adapter with oncepay's settings, for the users'
	// writes and the admin's.
	idem, adminIdem httpkey.Handler

	anomalies *anomaly.Recorder
	users     *account.Users
	recharges *account.Recharges
	inventory *inventory.Store
	orders    *order.Service
	payments  *payment.Service
	trades    *payment.Trades
	refunds   *refund.Service
	bills     *jobs.Bills
	endpoints *webhook.Endpoints
	feed      *webhook.Feed
	// webhookPolicy is where webhooks may connect, at registration and at every dial.
	webhookPolicy webhook.AddressPolicy
	handler       http.Handler
	checks        []readyCheck
	runners       []Runner
	closers       []func() error
	// extra mounts the routes of Deps.Routes.
	extra func(a *App, r chi.Router)
	// Seeded are the demo users this start seeded and their keys, for the banner (seed.go).
	Seeded []SeededUser
	// consumersReady reports whether the Kafka consumers have joined their groups.
	consumersReady func() bool
}

// Deps lets tests hand in connections they own (nil fields are opened from the config), and
// lets another build of the service add to it. The service's own binary sets none of it.
type Deps struct {
	DB    *gorm.DB
	Redis *redisx.Conn
	Kafka *kafka.Cluster
	// Routes, when set, mounts routes of another build beside the API, on the router of
	// routes.go: the training kit's lab, in the lab's own build.
	Routes func(a *App, r chi.Router)
	// GuardConfig, when set, rewrites the guard's configuration before the guard is built:
	// the bench (bench/) and the training kit add idempotent/idemlab's switches with it
	// (idemlab.With) — a layer turned off, a pause under the lease — and tests slow a payment
	// down. The guard a service runs is built from its Config alone.
	GuardConfig func(idempotent.Config) idempotent.Config
}

// New builds an instance from cfg: it opens (or takes) every dependency, migrates, seeds the
// demo data when asked, and builds the router. Nothing runs until Run.
func New(ctx context.Context, cfg config.Config, deps Deps) (_ *App, err error) {
	a := &App{Config: cfg, Registry: prometheus.NewRegistry(), extra: deps.Routes}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	a.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Snowflake ids, one node per instance.
	if a.IDs, err = ids.New(cfg.NodeID); err != nil {
		return nil, err
	}

	// Database: MySQL when configured, embedded SQLite otherwise; migrated at start-up.
	a.DB = deps.DB
	if a.DB == nil {
		a.DB, err = database.Open(database.Options{
			MySQLDSN:      cfg.MySQLDSN,
			SQLitePath:    filepath.Join(cfg.DataDir, "oncepay.db"),
			WsrepSyncWait: cfg.MySQLWsrepSyncWait,
		})
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, func() error { return database.Close(a.DB) })
		if err = database.Migrate(ctx, a.DB); err != nil {
			return nil, err
		}
	}

	// Redis: one server on the configured logical database, a Redis Cluster when
	// ONCEPAY_REDIS_ADDR lists several nodes, or embedded.
	a.Redis = deps.Redis
	if a.Redis == nil {
		if a.Redis, err = redisx.Open(cfg.RedisAddrs, cfg.EmbeddedRedisAddr, cfg.RedisDB); err != nil {
			return nil, err
		}
		a.closers = append(a.closers, a.Redis.Close)
	}

	// Kafka: external or embedded; the embedded broker keeps its log under the data dir.
	a.Kafka = deps.Kafka
	if a.Kafka == nil {
		a.Kafka, err = kafka.Open(ctx, cfg.KafkaBrokers, kafka.EmbeddedOptions{
			Addr:    cfg.EmbeddedKafkaAddr,
			DataDir: filepath.Join(cfg.DataDir, "kafka"),
		})
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, func() error { a.Kafka.Close(); return nil })
	}

	// The idempotency layers: token, replay cache and lock in Redis, dedup record in the DB.
	// The guard knows no SQL driver, request id or error type of ours: they come in here.
	// Every Redis key it writes — tokens, replay cache, locks, consumer markers and the job
	// locks of idemops.RunLocked — starts with ONCEPAY_REDIS_PREFIX.
	guardCfg := idempotent.Config{
		KeyPrefix:          cfg.RedisPrefix,
		LockTTL:            cfg.LockTTL,
		TokenTTL:           cfg.IdempotencyTokenTTL,
		Now:                clock.Now,
		Retention:          cfg.DedupRetention,
		RejectWithoutRedis: cfg.RedisFailureMode == config.RedisReject,
		Classify:           idem.Classify(a.DB),
		Reject:             idem.StoredProblem,
		NewID:              a.IDs.Next,
		RequestID:          requestid.From,
		// The kit names its metrics idempotency_*; oncepay's /metrics has them as oncepay_*.
		Registerer: prometheus.WrapRegistererWithPrefix("oncepay_", a.Registry),
	}
	if deps.GuardConfig != nil {
		guardCfg = deps.GuardConfig(guardCfg)
	}
	a.Guard = idempotent.New(a.DB, a.Redis.Client, guardCfg)
	a.idem, a.adminIdem = idem.HTTP(a.Guard), idem.AdminHTTP(a.Guard)

	// Domain stores and services.
	a.users = account.NewUsers(a.DB, a.IDs)
	a.anomalies = anomaly.NewRecorder(a.DB, a.IDs)
	a.inventory = inventory.NewStore(a.DB)
	// One writer of events: order.events messages for Kafka and the merchant's events for
	// webhooks and the events API, each in the transaction of its change (I17).
	events := outbox.NewWriter(a.IDs)
	a.recharges = account.NewRecharges(a.DB, a.IDs, account.NewLedger(a.DB, a.IDs), a.anomalies, events)
	a.orders = order.NewService(a.DB, a.IDs, events, cfg.OrderTTL)
	a.payments = payment.NewService(a.IDs, a.orders, a.anomalies)

	// The one inbound port for channel reports — trades, recharges, refunds; over HTTP, over
	// Kafka, and from oncepay's own questions to the channel — each kind applied by its
	// domain. Only configured channels are heard, each checked with its own secret.
	secrets := map[string]string{}
	for _, ch := range cfg.Channels {
		secrets[ch.Name] = ch.Secret
	}
	a.Reports = notify.New(notify.Config{
		Guard: a.Guard, DB: a.DB, Anomalies: a.anomalies, Secrets: secrets,
		Tolerance: cfg.SignatureTolerance, KafkaWindow: cfg.MaxRedeliveryWindow,
		// A report's signed time is checked against the instance's clock: one that runs off
		// by more than the tolerance refuses honest reports with 401, which stores nothing,
		// and the channel's next attempt, on another instance, applies
		// (TestReportRefusedOnClockPastTolerance).
		Now: clock.Now,
	}, map[notify.Kind]notify.Applier{
		notify.Trade:    a.payments,
		notify.Recharge: a.recharges,
		notify.Refund:   refund.NewReports(a.orders, a.anomalies, events, ledger.New(a.IDs)),
	})

	// The payment channels (outbound): each configured channel's client, whose timeouts are
	// indefinite, never "failed" (I8) — the embedded simulator's unless ONCEPAY_CHANNEL_URL
	// names a real channel. Trades are opened with ONCEPAY_CHANNEL_NAME and asked about before
	// an order closes (I9); a refund goes through the channel that took the payment and follows
	// recovery points (I8).
	if a.ChannelURL, err = a.startChannel(cfg); err != nil {
		return nil, err
	}
	clients := map[string]*channel.Client{}
	for _, ch := range cfg.Channels {
		base := ch.URL
		if base == "" && ch.Name == cfg.ChannelName {
			base = a.ChannelURL
		}
		if base == "" {
			// The embedded simulator is ONCEPAY_CHANNEL_NAME only: another name without a URL
			// of its own has no API here, so that a report under it can never have the
			// simulator refund a trade it holds under its own name (its refunds end FAILED,
			// for an operator).
			continue
		}
		clients[ch.Name] = channel.New(channel.Config{BaseURL: base, Secret: ch.Secret, Timeout: cfg.ChannelTimeout, Retries: uint64(cfg.ChannelRetries)})
	}
	client := clients[cfg.ChannelName]
	a.trades = payment.NewTrades(a.DB, a.orders, client, cfg.ChannelName, cfg.PublicURL+notify.Routes[notify.Trade], a.Reports.Settle)
	a.refunds = refund.NewService(a.DB, a.IDs, a.orders, clients, cfg.PublicURL+notify.Routes[notify.Refund], a.Reports.Settle, events)
	a.bills = jobs.NewBills(a.DB, client, cfg.ChannelName, a.anomalies, a.trades)

	// Background loops: the trade reports consumer (I1), the outbox relay, and the scheduled
	// jobs (I5, I6), each stopped and drained by Run on shutdown.
	payments := notify.NewConsumer(a.Reports, a.Kafka)
	publisher := a.Kafka.Writer()
	a.closers = append(a.closers, publisher.Close)
	a.runners = append(a.runners,
		payments,
		outbox.NewRelay(a.DB, publisher, func(ctx context.Context, name string, fn func(ctx context.Context) error) (bool, error) {
			return idemops.RunLocked(ctx, a.Guard, name, fn)
		}),
		&jobs.Scheduled{Name: "close-expired-orders", Interval: cfg.CloseJobInterval, Guard: a.Guard, Job: jobs.CloseExpiredOrders(a.orders, a.trades.BeforeClose)},
		&jobs.Scheduled{Name: "reconcile-payments", Interval: cfg.ReconcileJobInterval, Guard: a.Guard, Job: jobs.ReconcilePayments(a.trades)},
		&jobs.Scheduled{Name: "resume-refunds", Interval: cfg.RefundJobInterval, Guard: a.Guard, Job: a.refunds.Resume},
		&jobs.Scheduled{Name: "purge-dedup-records", Interval: cfg.PurgeJobInterval, Guard: a.Guard, Job: jobs.PurgeDedupRecords(a.Guard, cfg.DedupRetention)},
	)
	a.consumersReady = payments.Ready

	// Webhooks (docs/contract.md): every instance sequences committed events into the feed and,
	// apart from it, sends the deliveries that are due, each endpoint from its own queue, under
	// a lease per delivery in the database that a heartbeat keeps while the attempt lasts, so
	// that none is sent twice at once, a slow receiver delays only itself and a killed
	// instance's deliveries are picked up by the others; the feed is purged past
	// ONCEPAY_EVENT_RETENTION. Their signing secrets are sealed at rest under
	// ONCEPAY_WEBHOOK_KEYS; rows in plain text (from before sealing) or under a key rotated out
	// are sealed again at every start.
	webhookKeys, err := keyring.Parse(cfg.WebhookKeys)
	if err != nil {
		return nil, fmt.Errorf("ONCEPAY_WEBHOOK_KEYS: %w", err)
	}
	a.endpoints = webhook.NewEndpoints(a.DB, a.IDs, webhookKeys)
	if _, err := a.endpoints.Reseal(ctx); err != nil {
		return nil, fmt.Errorf("seal webhook secrets: %w", err)
	}
	var running []string // the embedded servers' real addresses, a free port's included
	if a.Redis.Embedded != nil {
		running = append(running, a.Redis.Embedded.Addr())
	}
	if a.Kafka.Embedded != nil {
		running = append(running, a.Kafka.Brokers...)
	}
	a.webhookPolicy = webhookPolicy(ctx, cfg, a.ChannelURL, running...)
	a.webhookPolicy.Later = &webhook.OwnLater{} // Run adds the listener's real address
	a.feed = webhook.NewFeed(a.DB)
	hookMetrics := webhook.NewMetrics(a.Registry, a.DB)
	sequencer := webhook.NewSequencer(a.DB, a.IDs)
	sequencer.Metrics = hookMetrics
	sender := webhook.NewSender(a.DB, a.IDs, a.anomalies, cfg.WebhookSchedule, cfg.WebhookTimeout).
		UsePolicy(a.webhookPolicy).UseKeys(webhookKeys)
	sender.Metrics = hookMetrics
	a.runners = append(a.runners,
		&webhook.Loop{Sequencer: sequencer, Sender: sender, Interval: cfg.WebhookInterval},
		&jobs.Scheduled{Name: "purge-events", Interval: cfg.PurgeJobInterval, Guard: a.Guard, Job: func(ctx context.Context) (int64, error) {
			return a.feed.Purge(ctx, cfg.EventRetention)
		}},
	)

	if cfg.SeedDemo {
		if err = a.seedDemo(ctx); err != nil {
			return nil, fmt.Errorf("seed demo data: %w", err)
		}
	}

	a.checks = []readyCheck{
		{name: "database", check: func(ctx context.Context) error { return database.Ping(ctx, a.DB) }},
		{name: "redis", check: a.Redis.Ping, degradable: cfg.RedisFailureMode == config.RedisDegrade},
		{name: "kafka", check: a.kafkaReady},
	}
	a.handler = a.routes(web.NewMetrics(a.Registry))
	return a, nil
}

// startChannel returns the channel's base URL: ONCEPAY_CHANNEL_URL, or the embedded
// simulator's, started here on ONCEPAY_EMBEDDED_CHANNEL_ADDR (port 0 picks a free one) with its
// state in $ONCEPAY_DATA_DIR/channelsim.json, and stopped by Close.
func (a *App) startChannel(cfg config.Config) (string, error) {
	if !cfg.EmbeddedChannel() {
		return cfg.ChannelURL, nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return "", fmt.Errorf("embedded channel simulator: data dir %s: %w", cfg.DataDir, err)
	}
	ln, err := net.Listen("tcp", cfg.EmbeddedChannelAddr)
	if err != nil {
		return "", fmt.Errorf("embedded channel simulator: listen on %s (set ONCEPAY_EMBEDDED_CHANNEL_ADDR, or ONCEPAY_CHANNEL_URL): %w", cfg.EmbeddedChannelAddr, err)
	}
	base := "http://" + ln.Addr().String()
	own, _ := cfg.ChannelNamed(cfg.ChannelName)
	sim, err := channelsim.New(channelsim.Config{
		Secret: own.Secret, Channel: cfg.ChannelName, StateFile: filepath.Join(cfg.DataDir, "channelsim.json"),
		Schedule: cfg.ChannelSimSchedule, PublicURL: base,
	})
	if err != nil {
		_ = ln.Close()
		return "", err
	}
	srv := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	a.Channel = sim
	a.closers = append(a.closers, sim.Close, srv.Close)
	return base, nil
}

// Handler is the instance's HTTP handler, for tests and for Run.
func (a *App) Handler() http.Handler { return a.handler }

// Run serves HTTP on ln (or on the configured address when ln is nil) and runs the
// background loops until ctx ends, then shuts down gracefully: it stops accepting, finishes
// in-flight requests, and waits for the loops to drain.
func (a *App) Run(ctx context.Context, ln net.Listener) error {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", a.Config.HTTPAddr); err != nil {
			return fmt.Errorf("listen on %s (set ONCEPAY_HTTP_ADDR): %w", a.Config.HTTPAddr, err)
		}
	}
	// The listener's real address is an own address of the webhook policy before any webhook
	// is sent: on ONCEPAY_HTTP_ADDR=127.0.0.1:0 the configured port 0 guarded none (hostile
	// pass of issue 27).
	a.webhookPolicy.Later.Add(ctx, ln.Addr().String())
	srv := &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}

	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	var wg sync.WaitGroup
	for _, r := range a.runners {
		wg.Go(func() {
			if err := r.Run(loopCtx); err != nil && !errors.Is(err, context.Canceled) {
				slog.ErrorContext(ctx, "background loop stopped", "loop", fmt.Sprintf("%T", r), "err", err)
			}
		})
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	slog.InfoContext(ctx, "oncepay listening", "addr", ln.Addr().String())

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	slog.InfoContext(ctx, "shutting down: finishing in-flight requests")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	if serr := srv.Shutdown(shutdownCtx); serr != nil {
		slog.ErrorContext(ctx, "http shutdown", "err", serr)
	}
	stopLoops()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Close releases what the instance opened itself — never the dependencies handed in through
// Deps, which belong to the caller — in the reverse order of opening.
func (a *App) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		_ = a.closers[i]()
	}
}
