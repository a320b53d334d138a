package app

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/oncepay/oncepay/internal/platform/web"
)

// readyCheck is one dependency /readyz asks about.
type readyCheck struct {
	name  string
	check func(ctx context.Context) error
	// degradable dependencies report "degraded" without failing readiness: with
	// ONCEPAY_REDIS_FAILURE_MODE=degrade the database layers still give exactly-once.
	degradable bool
}

func (a *App) healthz(w http.ResponseWriter, _ *http.Request) {
	web.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 only when every dependency answers (a degradable one may be degraded).
func (a *App) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	status, code := "ready", http.StatusOK
	checks := map[string]string{}
	for _, c := range a.checks {
		err := c.check(ctx)
		switch {
		case err == nil:
			checks[c.name] = "ok"
		case c.degradable:
			checks[c.name] = "degraded: " + err.Error()
			status = "degraded"
		default:
			checks[c.name] = "unavailable: " + err.Error()
			status, code = "unavailable", http.StatusServiceUnavailable
		}
	}
	web.WriteJSON(w, code, map[string]any{"status": status, "checks": checks})
}

// errConsumersNotJoined is the readiness answer while the consumers are joining their groups.
var errConsumersNotJoined = errors.New("consumers have not joined their groups yet")

// kafkaReady checks the broker and that the consumers have joined: before that, a message
// published now would wait, and /readyz must not promise otherwise (docs/contract.md, Kafka).
func (a *App) kafkaReady(ctx context.Context) error {
	if err := a.Kafka.Ping(ctx); err != nil {
		return err
	}
	if a.consumersReady != nil && !a.consumersReady() {
		return errConsumersNotJoined
	}
	return nil
}
