package idempotent

import (
	"context"
	"log/slog"
	"time"
)

// PurgeOptions bounds one purge run.
type PurgeOptions struct {
	// OlderThan deletes records created before now-OlderThan.
	OlderThan time.Duration
	// BatchSize is the most rows one DELETE touches (default 500), so that the purge never
	// holds many row locks at once.
	BatchSize int
	// Pause is the sleep between batches (default 50ms), to leave room for live traffic.
	Pause time.Duration
}

// Purge deletes dedup records older than opts.OlderThan in bounded batches, and their replay
// cache entries and consumer markers with them, so that nothing remembers a purged key (I6).
// The configured retention must cover the longest redelivery window (config validates it);
// the state preconditions are what still hold for a copy that arrives after its purge.
func (g *Guard) Purge(ctx context.Context, opts PurgeOptions) (int64, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = 500
	}
	if opts.Pause <= 0 {
		opts.Pause = 50 * time.Millisecond
	}
	cutoff := time.Now().UTC().Add(-opts.OlderThan)
	var total int64
	for {
		var batch []Record
		err := g.db.WithContext(ctx).Select("id", "scope", "biz_type", "biz_key").
			Where("created_at < ?", cutoff).Order("id").Limit(opts.BatchSize).Find(&batch).Error
		if err != nil {
			return total, err
		}
		if len(batch) == 0 {
			return total, nil
		}
		ids := make([]int64, len(batch))
		keys := make([]string, 0, 2*len(batch))
		for i, rec := range batch {
			ids[i] = rec.ID
			k := Key{Scope: rec.Scope, BizType: rec.BizType, BizKey: rec.BizKey}
			keys = append(keys, g.cacheKey(k), g.markerKey(k))
		}
		res := g.db.WithContext(ctx).Where("id IN ?", ids).Delete(&Record{})
		if res.Error != nil {
			return total, res.Error
		}
		if err := g.rdb.Del(ctx, keys...).Err(); err != nil {
			slog.WarnContext(ctx, "purge: could not drop replay cache entries", "err", err)
		}
		total += res.RowsAffected
		g.metrics.purged.Add(float64(res.RowsAffected))
		if len(batch) < opts.BatchSize {
			return total, nil
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(opts.Pause):
		}
	}
}
