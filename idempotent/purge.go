package idempotent

import (
	"context"
	"errors"
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

// ErrPurgeIncomplete is a purge that stopped because the replay cache entries and consumer
// markers of a batch could not be dropped (Redis unreachable): the batch's records were kept,
// so that the next run drops both; the count says how many were purged before. It is also a
// purge that could not make the instances forget the answers they keep: the next run does.
var ErrPurgeIncomplete = errors.New("purge stopped: the replay cache could not be cleaned (redis unavailable); the remaining records are kept for the next run")

// Purge deletes dedup records older than opts.OlderThan in bounded batches, and their replay
// cache entries and consumer markers first, so that nothing remembers a purged key (I6): a
// batch whose Redis keys cannot be dropped is kept, and Purge returns ErrPurgeIncomplete with
// the count purged so far. Then, whatever it deleted, it makes every instance drop the
// answers it keeps in memory, and returns about a second later, once none can answer from
// them (answers); when it cannot reach Redis for that, it returns ErrPurgeIncomplete too, and
// a rerun finishes the job. The configured retention must cover the longest redelivery window
// (config validates it); the claims and the state preconditions are what still hold for a
// copy that arrives after its purge (I13).
func (g *Guard) Purge(ctx context.Context, opts PurgeOptions) (int64, error) {
	n, err := g.purge(ctx, opts)
	// Whatever this run deleted: a run before it may have deleted records and failed to
	// reach Redis here, and its rerun, finding nothing left to delete, must finish its job.
	if ferr := g.forgetAnswers(context.WithoutCancel(ctx)); ferr != nil {
		slog.WarnContext(ctx, "purge: could not make the instances forget the answers they keep", "purged", n, "err", ferr)
		if !errors.Is(err, ErrPurgeIncomplete) {
			err = errors.Join(err, ErrPurgeIncomplete)
		}
		err = errors.Join(err, ferr)
	}
	return n, err
}

func (g *Guard) purge(ctx context.Context, opts PurgeOptions) (int64, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = 500
	}
	if opts.Pause <= 0 {
		opts.Pause = 50 * time.Millisecond
	}
	cutoff := g.cfg.Now().UTC().Add(-opts.OlderThan)
	var total int64
	for {
		// Oldest first along the created_at index: a range scan that stops at the batch's
		// size, whatever order the ids were drawn in (by id, a table of random ids is scanned
		// from its start for every batch).
		var batch []Record
		err := g.db.WithContext(ctx).Select("id", "scope", "biz_type", "biz_key").
			Where("created_at < ?", cutoff).Order("created_at, id").Limit(opts.BatchSize).Find(&batch).Error
		if err != nil {
			return total, err
		}
		if len(batch) == 0 {
			return total, nil
		}
		if err := g.forget(ctx, batch); err != nil {
			slog.WarnContext(ctx, "purge: could not drop replay cache entries; stopping", "purged", total, "err", err)
			return total, errors.Join(ErrPurgeIncomplete, err)
		}
		ids := make([]int64, len(batch))
		for i, rec := range batch {
			ids[i] = rec.ID
		}
		res := g.db.WithContext(ctx).Where("id IN ?", ids).Delete(&Record{})
		if res.Error != nil {
			return total, res.Error
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

// forget drops the replay cache entries and consumer markers of the keys of recs. It sends one
// DEL per key, pipelined, and never one DEL of the whole batch: the keys of different
// idempotency keys have different hash tags, so on a Redis Cluster a DEL of several of them
// is refused with CROSSSLOT. The pipeline is one round trip on a single server and one per
// node on a cluster, where go-redis sends each node its share.
func (g *Guard) forget(ctx context.Context, recs []Record) error {
	if g.rdb == nil {
		return nil
	}
	pipe := g.rdb.Pipeline()
	for _, rec := range recs {
		k := Key{Scope: rec.Scope, BizType: rec.BizType, BizKey: rec.BizKey}
		pipe.Del(ctx, g.cacheKey(k), g.markerKey(k))
	}
	_, err := pipe.Exec(ctx)
	return err
}
