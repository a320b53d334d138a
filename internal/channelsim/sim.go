// Package channelsim simulates the payment channel oncepay calls: it opens, answers about,
// closes and refunds trades (/channel/v1/…), plays the buyer who pays (/sim/…), and sends
// signed payment and refund notifications that it retries on a schedule until they are
// acknowledged, as Alipay does. Faults (lost, duplicated and late notifications; writes that
// time out although applied; writes refused before they apply) can be switched on to drill
// the incidents docs/contract.md and docs/incidents.md describe.
//
// The package depends on nothing of oncepay's service, so that the simulator stays an
// independent party: it verifies oncepay's requests with its own HMAC-SHA256 code, and signs
// its reports with internal/platform/reportsig, the one implementation of the report
// signature that both sides of that interface agree on.
package channelsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// DefaultChannel is the channel name put in notifications unless Config.Channel says
// otherwise.
const DefaultChannel = "simpay"

// DefaultRefundDelay is how long a refund stays PROCESSING unless Config.RefundDelay says
// otherwise.
const DefaultRefundDelay = time.Second

// defaultNotifyTimeout bounds one notification attempt of the default client.
const defaultNotifyTimeout = 5 * time.Second

// DefaultSchedule returns Alipay's notification retry schedule: after the immediate attempt,
// again 4m, 10m, 10m, 1h, 2h, 6h and 15h later.
func DefaultSchedule() []time.Duration {
	return []time.Duration{
		4 * time.Minute, 10 * time.Minute, 10 * time.Minute,
		time.Hour, 2 * time.Hour, 6 * time.Hour, 15 * time.Hour,
	}
}

// Config configures a Sim. Only Secret is required.
type Config struct {
	Secret    string          // HMAC-SHA256 key, both ways: requests from oncepay carry X-Signature over the raw body (refused 401 invalid_signature otherwise); notifications the sim sends carry X-Signature too
	Channel   string          // the channel name put in notifications, default "simpay" (lowercase [a-z][a-z0-9_]*)
	StateFile string          // JSON file the state is saved to after every change and loaded from at New; "" keeps it in memory
	Schedule  []time.Duration // notification retries after the first, immediate attempt; nil means DefaultSchedule, an empty non-nil slice means no retries
	PublicURL string          // base URL of the sim itself, for pay_url (cashier page); "" makes pay_url a path
	Client    *http.Client    // used to send notifications; default a client with a 5 s timeout
	Now       func() time.Time
	Logger    *slog.Logger

	// RefundDelay is how long a refund stays PROCESSING before it succeeds and is notified;
	// 0 means DefaultRefundDelay. (An extension of the agreed API.)
	RefundDelay time.Duration
}

// withDefaults checks cfg and fills in the defaults.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Secret == "" {
		return cfg, errors.New("channelsim: the secret is empty")
	}
	if cfg.Channel == "" {
		cfg.Channel = DefaultChannel
	}
	if !validChannel(cfg.Channel) {
		return cfg, fmt.Errorf("channelsim: channel %q is not a lowercase name ([a-z][a-z0-9_]{0,31})", cfg.Channel)
	}
	if cfg.Schedule == nil {
		cfg.Schedule = DefaultSchedule()
	}
	for _, d := range cfg.Schedule {
		if d <= 0 {
			return cfg, fmt.Errorf("channelsim: schedule step %s is not positive", d)
		}
	}
	cfg.Schedule = append([]time.Duration{}, cfg.Schedule...)
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: defaultNotifyTimeout}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RefundDelay <= 0 {
		cfg.RefundDelay = DefaultRefundDelay
	}
	return cfg, nil
}

// validChannel reports whether name is ^[a-z][a-z0-9_]{0,31}$.
func validChannel(name string) bool {
	if len(name) == 0 || len(name) > 32 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for _, c := range []byte(name[1:]) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// ParseSchedule reads a retry schedule such as "4m,10m,10m,1h": comma-separated positive Go
// durations. An empty (or blank) string returns nil, which New reads as DefaultSchedule.
func ParseSchedule(s string) ([]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	schedule := make([]time.Duration, 0, len(parts))
	for _, p := range parts {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("channelsim: schedule step %q: %w", p, err)
		}
		if d <= 0 {
			return nil, fmt.Errorf("channelsim: schedule step %q is not positive", p)
		}
		schedule = append(schedule, d)
	}
	return schedule, nil
}

// Sim is a running channel simulator. Its methods are safe for concurrent use.
type Sim struct {
	cfg     Config
	log     *slog.Logger
	handler http.Handler

	ctx    context.Context // cancelled by Close: stops the background goroutines
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex // guards everything below, and the state file
	closed  bool
	faults  Faults
	seq     int64 // the last notification id handed out
	trades  map[string]*TradeRecord
	refunds map[string]*RefundRecord
	notes   map[string]*Notification
}

// New returns a simulator with the state saved in cfg.StateFile (if any), and resumes what
// was under way when it was saved: notifications not yet acknowledged and refunds still
// PROCESSING.
func New(cfg Config) (*Sim, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	saved, err := loadState(cfg.StateFile)
	if err != nil {
		return nil, err
	}
	s := &Sim{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "channelsim"),
		trades:  map[string]*TradeRecord{},
		refunds: map[string]*RefundRecord{},
		notes:   map[string]*Notification{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.restore(saved)
	s.handler = s.routes()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resumeLocked()
	return s, nil
}

// Handler returns the HTTP handler serving /channel/v1/… (the channel API, signed) and /sim/…
// (the buyer and network controls and the cashier page).
func (s *Sim) Handler() http.Handler { return s.handler }

// Close stops the notifier and refund goroutines and saves the state. Notifications not yet
// acknowledged stay pending in the state file and resume at the next New.
func (s *Sim) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saveLocked()
}

// SetFaults replaces the faults in force; the zero Faults clears them. Values out of range are
// clamped (PUT /sim/faults refuses them instead).
func (s *Sim) SetFaults(f Faults) {
	f = f.clamped()
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
	s.log.Warn("channel simulator faults set",
		"drop_notifications", f.DropNotifications,
		"duplicate_notifications", f.DuplicateNotifications,
		"notify_delay", time.Duration(f.NotifyDelay).String(),
		"timeout_after_apply", f.TimeoutAfterApply,
		"fail_before_apply", f.FailBeforeApply)
}

// currentFaults returns the faults in force.
func (s *Sim) currentFaults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// now returns the simulator's clock in UTC.
func (s *Sim) now() time.Time { return s.cfg.Now().UTC() }

// goLocked runs f in a background goroutine that Close waits for, unless the simulator is
// closed. The caller holds s.mu, so that no goroutine starts once Close began waiting.
func (s *Sim) goLocked(f func()) {
	if s.closed {
		return
	}
	s.wg.Go(f)
}

// sleepUntil waits until t on the simulator's clock; it returns false if Close came first.
func (s *Sim) sleepUntil(t time.Time) bool {
	return s.sleep(t.Sub(s.now()))
}

// sleep waits d; it returns false if Close came first.
func (s *Sim) sleep(d time.Duration) bool {
	if d <= 0 {
		return s.ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}
