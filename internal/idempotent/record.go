package idempotent

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
)

// Record statuses. A record is inserted PROCESSING and completed in the same transaction, so
// a committed PROCESSING record only exists for work that commits it on purpose in steps.
const (
	StatusProcessing = "PROCESSING"
	StatusCompleted  = "COMPLETED"
)

// Record is a row of idempotency_records: the dedup table (I3). Its unique index on
// (scope, biz_type, biz_key) is the guarantee; request_id is kept for diagnosis and is not
// unique, because every copy of a request may carry its own.
type Record struct {
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
	CreatedAt       time.Time
	UpdatedAt       time.Time
	ExpiresAt       time.Time
}

// TableName is the table of Record.
func (Record) TableName() string { return "idempotency_records" }

func (r Record) response() Response {
	resp := Response{Status: r.ResponseStatus, Body: r.ResponseBody}
	if r.ResponseHeaders != "" {
		_ = json.Unmarshal([]byte(r.ResponseHeaders), &resp.Header)
	}
	return resp
}

// insertRecord inserts the PROCESSING record for key inside tx. It returns
// database.ErrDuplicateKey when another attempt holds or committed the key.
func insertRecord(ctx context.Context, tx *gorm.DB, rec *Record) error {
	return database.Translate(tx.WithContext(ctx).Create(rec).Error)
}

// completeRecord stores the outcome on the record inside the same transaction.
func completeRecord(ctx context.Context, tx *gorm.DB, id int64, resp Response) error {
	headers, _ := json.Marshal(resp.Header)
	return tx.WithContext(ctx).Model(&Record{}).Where("id = ?", id).Updates(map[string]any{
		"status":           StatusCompleted,
		"response_status":  resp.Status,
		"response_headers": string(headers),
		"response_body":    resp.Body,
		"updated_at":       time.Now().UTC(),
	}).Error
}

// loadRecord reads the committed record of key, outside any transaction.
func loadRecord(ctx context.Context, db *gorm.DB, k Key) (Record, bool, error) {
	var rec Record
	err := db.WithContext(ctx).
		Where("scope = ? AND biz_type = ? AND biz_key = ?", k.Scope, k.BizType, k.BizKey).
		Take(&rec).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Record{}, false, nil
	}
	return rec, err == nil, err
}
