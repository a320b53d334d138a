package database

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// sqliteNow is SQLite's clock as its strftime writes it, to the millisecond, in UTC.
const sqliteNow = "2006-01-02 15:04:05.000"

// Now returns the database server's clock, in UTC: on MySQL and MariaDB UTC_TIMESTAMP(6), on
// SQLite strftime('now'), which is the clock of the machine the file is on. A decision that
// instances must agree on — has this order expired, is this lease still held — compares
// against it rather than against the instance's own clock (internal/platform/clock), which may
// run minutes off: a close job on an instance ten minutes ahead closed orders ten minutes
// before their expires_at, and a sender ten minutes ahead took over leases still held. db may
// be a transaction; the read is one round trip.
func Now(ctx context.Context, db *gorm.DB) (time.Time, error) {
	conn := db.WithContext(ctx)
	if DialectOf(db) == MySQL {
		var now time.Time
		if err := conn.Raw("SELECT UTC_TIMESTAMP(6)").Scan(&now).Error; err != nil {
			return time.Time{}, fmt.Errorf("the database's clock: %w", err)
		}
		return now.UTC(), nil
	}
	var s string
	if err := conn.Raw("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')").Scan(&s).Error; err != nil {
		return time.Time{}, fmt.Errorf("the database's clock: %w", err)
	}
	now, err := time.ParseInLocation(sqliteNow, s, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("the database's clock: %q: %w", s, err)
	}
	return now, nil
}
