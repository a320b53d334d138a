package database

import (
	"context"
	"database/sql/driver"
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

// NowSQL is the SQL expression of the database's clock (see Now), for a write that reads it
// in a query it sends anyway rather than in a round trip of its own; scan it into a Clock.
func NowSQL(db *gorm.DB) string {
	if DialectOf(db) == MySQL {
		return "UTC_TIMESTAMP(6)"
	}
	return "strftime('%Y-%m-%d %H:%M:%f', 'now')"
}

// Clock is the database's clock read by NowSQL, in UTC, whichever way the driver hands it
// over: a time.Time (MySQL with parseTime), or SQLite's text.
type Clock struct{ time.Time }

// Scan implements sql.Scanner.
func (c *Clock) Scan(v any) error {
	switch v := v.(type) {
	case time.Time:
		c.Time = v.UTC()
		return nil
	case string:
		return c.parse(v)
	case []byte:
		return c.parse(string(v))
	}
	return fmt.Errorf("the database's clock: cannot read %T", v)
}

func (c *Clock) parse(s string) error {
	// A layout without a fraction parses any fraction the text has (SQLite's milliseconds,
	// MySQL's microseconds when the driver does not parse times).
	t, err := time.ParseInLocation(time.DateTime, s, time.UTC)
	if err != nil {
		return fmt.Errorf("the database's clock: %q: %w", s, err)
	}
	c.Time = t
	return nil
}

// Value implements driver.Valuer, which gorm asks of a struct column's type.
func (c Clock) Value() (driver.Value, error) { return c.Time, nil }
