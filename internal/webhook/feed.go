package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Feed serves the events API (GET /v1/admin/events) and purges what is past retention.
type Feed struct {
	db *gorm.DB
}

// NewFeed returns the feed on db.
func NewFeed(db *gorm.DB) *Feed { return &Feed{db: db} }

// Page is one page of the feed: events in seq order after a cursor, and the cursor of the
// last one.
type Page struct {
	Events []json.RawMessage `json:"events"`
	// NextCursor is the cursor after the page's last event — the one given when the page is
	// empty — so that a client polling the feed passes it back unchanged for ever.
	NextCursor string `json:"next_cursor"`
	// HasMore says whether more events were already sequenced past the page.
	HasMore bool `json:"has_more"`
}

// List returns up to limit sequenced events with seq > after, of one of types (all when
// empty), in seq order.
func (f *Feed) List(ctx context.Context, after int64, types []string, limit int) (Page, error) {
	q := f.db.WithContext(ctx).Model(&outbox.Event{}).Where("seq > ?", after)
	if len(types) > 0 {
		q = q.Where("type IN ?", types)
	}
	var rows []outbox.Event
	if err := q.Order("seq").Limit(limit + 1).Find(&rows).Error; err != nil {
		return Page{}, err
	}
	p := Page{Events: []json.RawMessage{}, NextCursor: encodeCursor(after)}
	if len(rows) > limit {
		rows, p.HasMore = rows[:limit], true
	}
	for _, r := range rows {
		p.Events = append(p.Events, json.RawMessage(r.Payload))
		p.NextCursor = encodeCursor(*r.Seq)
	}
	return p, nil
}

// ListHandler serves GET /v1/admin/events?after=&type=&limit=: the events in order of their
// place in the feed (commit order, see Sequencer), after the opaque cursor `after` (from the
// oldest retained event without it), of the comma-separated types given (all without),
// limit 1..1000 (default 100). A client that replays from a cursor sees every event once, in
// order, also across instances. Unknown or repeated parameters are 400 invalid_request.
func (f *Feed) ListHandler(w http.ResponseWriter, r *http.Request) {
	after, types, limit, err := feedParams(r.URL.Query())
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	if err := f.checkIssued(r.Context(), after); err != nil {
		web.WriteError(w, r, err)
		return
	}
	p, err := f.List(r.Context(), after, types, limit)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, p)
}

func feedParams(q url.Values) (after int64, types []string, limit int, err error) {
	limit = 100
	for name, values := range q {
		if len(values) != 1 {
			return 0, nil, 0, apperr.ErrInvalidRequest.Withf("query parameter %q is given %d times; give it once", name, len(values))
		}
		v := values[0]
		switch name {
		case "limit":
			if limit, err = parseLimit(v); err != nil {
				return 0, nil, 0, err
			}
		case "after":
			if after, err = decodeCursor("e", v); err != nil {
				return 0, nil, 0, err
			}
		case "type":
			// Known types, each once: at most len(outbox.EventTypes) of them, so that no list
			// of 33,000 types reaches the database as 33,000 SQL variables (issue 27).
			if len(v) > 1024 {
				return 0, nil, 0, apperr.ErrInvalidRequest.Withf("type is %d bytes long: list at most the %d event types, each once", len(v), len(outbox.EventTypes))
			}
			types = strings.Split(v, ",")
			if err := CheckTypes("type", types); err != nil {
				return 0, nil, 0, err
			}
		default:
			return 0, nil, 0, apperr.ErrInvalidRequest.Withf("unknown query parameter %q: use after, type and limit", name)
		}
	}
	return after, types, limit, nil
}

func parseLimit(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, apperr.ErrInvalidRequest.Withf("limit must be an integer in 1..1000, got %q", v)
	}
	return n, nil
}

// A cursor is opaque to clients: the base64 of "<kind>:<n>".
func encodeCursor(n int64) string { return encodeCursorOf("e", n) }

func encodeCursorOf(kind string, n int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + strconv.FormatInt(n, 10)))
}

// ErrForgedCursor is a cursor this server cannot have given.
var ErrForgedCursor = apperr.ErrInvalidRequest.Withf("cursor is not one this server gave: pass next_cursor unchanged")

// decodeCursor reads a cursor of kind back into its number. Only the one spelling the server
// writes is read: "e:+3", "e:03" or another base64 of the same bytes could not have been given,
// and a client that made one up gets 400 rather than a page it did not ask for.
func decodeCursor(kind, c string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	rest, ok := strings.CutPrefix(string(raw), kind+":")
	n, perr := strconv.ParseInt(rest, 10, 64)
	if err != nil || !ok || perr != nil || n < 0 || encodeCursorOf(kind, n) != c {
		return 0, ErrForgedCursor
	}
	return n, nil
}

// checkIssued refuses a feed cursor past the end: every cursor given is 0 or the seq of a
// sequenced event, below the counter's next_seq. A poller holding a forged one past the end
// would see nothing for ever and never know.
func (f *Feed) checkIssued(ctx context.Context, after int64) error {
	if after == 0 {
		return nil
	}
	var next int64
	if err := f.db.WithContext(ctx).Table("event_sequence").Select("next_seq").Where("name = ?", "events").Scan(&next).Error; err != nil {
		return err
	}
	if after >= next {
		return ErrForgedCursor
	}
	return nil
}

// Purge deletes the events created before now − olderThan, with their deliveries and
// attempts, in batches, and returns how many events it deleted. A delivery still pending is
// kept, and so is its event: nothing is dropped while it may still be sent — unless its
// endpoint is disabled: a disabled endpoint sends nothing, and its pending deliveries expire
// with the events' retention rather than keep them for ever.
func (f *Feed) Purge(ctx context.Context, olderThan time.Duration) (int64, error) {
	const batch = 1000
	cutoff := clock.Now().Add(-olderThan)
	db := f.db.WithContext(ctx)
	if err := deleteBatches(ctx, db, "webhook_attempts", "sent_at < ?", cutoff, batch); err != nil {
		return 0, err
	}
	if err := deleteBatches(ctx, db, "webhook_deliveries", "created_at < ? AND (status <> 'pending' OR endpoint_id IN (SELECT id FROM webhook_endpoints WHERE status = 'disabled'))", cutoff, batch); err != nil {
		return 0, err
	}
	var purged int64
	for ctx.Err() == nil {
		var ids []int64
		err := db.Model(&outbox.Event{}).Where("created_at < ? AND seq IS NOT NULL", cutoff).
			Where("NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = events.id)").
			Order("created_at").Limit(batch).Pluck("id", &ids).Error
		if err != nil || len(ids) == 0 {
			return purged, err
		}
		res := db.Where("id IN ?", ids).Delete(&outbox.Event{})
		if res.Error != nil {
			return purged, res.Error
		}
		purged += res.RowsAffected
	}
	return purged, ctx.Err()
}

// deleteBatches deletes the rows of table matching where, batch ids at a time (neither
// dialect deletes with LIMIT inside IN).
func deleteBatches(ctx context.Context, db *gorm.DB, table, where string, arg any, batch int) error {
	for ctx.Err() == nil {
		var ids []int64
		if err := db.Table(table).Where(where, arg).Order("id").Limit(batch).Pluck("id", &ids).Error; err != nil || len(ids) == 0 {
			return err
		}
		if err := db.Exec("DELETE FROM "+table+" WHERE id IN ?", ids).Error; err != nil {
			return err
		}
	}
	return ctx.Err()
}

// DecodeEventCursor reads a cursor of the events API back into its seq, for tests and tools
// that page the feed in process.
func DecodeEventCursor(c string) (int64, error) { return decodeCursor("e", c) }
