package idempotent

import (
	"database/sql/driver"
	"fmt"
	"time"
)

// recordRow is how the guard reads a Record: the same columns, its times read by dbTime.
// go-sql-driver/mysql hands DATETIME columns over as text unless its DSN says
// parseTime=true, and gorm cannot scan that text into a time.Time: every replay that reached
// the record (the cache entry expired or evicted, Redis down) once failed with a 500 on such
// a DSN. Reading through dbTime makes the kit work with either setting.
type recordRow struct {
	ID              int64
	Scope           string
	BizType         string
	BizKey          string
	RequestID       string
	Fingerprint     string
	Status          string
	ResponseStatus  int
	ResponseHeaders string
	ResponseBody    []byte
	CreatedAt       dbTime
	UpdatedAt       dbTime
	ExpiresAt       dbTime
}

// TableName is Record's table.
func (recordRow) TableName() string { return Record{}.TableName() }

// record is the Record the row holds.
func (r recordRow) record() Record {
	return Record{
		ID: r.ID, Scope: r.Scope, BizType: r.BizType, BizKey: r.BizKey, RequestID: r.RequestID,
		Fingerprint: r.Fingerprint, Status: r.Status, ResponseStatus: r.ResponseStatus,
		ResponseHeaders: r.ResponseHeaders, ResponseBody: r.ResponseBody,
		CreatedAt: time.Time(r.CreatedAt), UpdatedAt: time.Time(r.UpdatedAt), ExpiresAt: time.Time(r.ExpiresAt),
	}
}

// dbTime is a time column as any driver hands it over: a time.Time, or the text of a
// DATETIME (MySQL without parseTime, some SQLite drivers), read in UTC — the zone the guard
// writes its times in.
type dbTime time.Time

// dbTimeLayouts are the text forms of a time the supported drivers send, most common first.
var dbTimeLayouts = []string{
	"2006-01-02 15:04:05.999999999",
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02T15:04:05.999999999",
}

// Scan reads a time.Time, or its text in one of dbTimeLayouts.
func (t *dbTime) Scan(v any) error {
	var s string
	switch v := v.(type) {
	case nil:
		*t = dbTime{}
		return nil
	case time.Time:
		*t = dbTime(v)
		return nil
	case []byte:
		s = string(v)
	case string:
		s = v
	default:
		return fmt.Errorf("idempotent: cannot read a time from %T", v)
	}
	for _, layout := range dbTimeLayouts {
		if parsed, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			*t = dbTime(parsed)
			return nil
		}
	}
	return fmt.Errorf("idempotent: cannot read a time from %q", s)
}

// Value writes the time as a time.Time, which every driver accepts.
func (t dbTime) Value() (driver.Value, error) { return time.Time(t), nil }
