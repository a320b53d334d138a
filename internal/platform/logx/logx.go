// Package logx builds oncepay's JSON slog logger. Its handler adds the request id carried by
// the context to every line, so that the articles' diagnosis can be answered from the logs:
// the same request id repeated means idempotency is missing; different ids on one row mean
// concurrency; a gap of milliseconds means concurrent copies, seconds or more a retry.
package logx

import (
	"context"
	"io"
	"log/slog"

	"github.com/oncepay/oncepay/internal/platform/requestid"
)

// New returns a JSON logger writing to w at level.
func New(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(contextHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})})
}

// contextHandler adds request_id from the record's context.
type contextHandler struct{ slog.Handler }

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := requestid.From(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h contextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return contextHandler{h.Handler.WithAttrs(attrs)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	return contextHandler{h.Handler.WithGroup(name)}
}
