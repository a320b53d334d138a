package idempotent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Record statuses (Record.Status).
const (
	statusProcessing = "PROCESSING"
	statusCompleted  = "COMPLETED"
)

// Record is a row of idempotency_records: the dedup table (I3). Its unique index on
// (scope, biz_type, biz_key) is the guarantee; request_id is kept for diagnosis and is not
// unique, because every copy of a request may carry its own. Schema holds its DDL.
type Record struct {
	ID          int64
	Scope       string
	BizType     string
	BizKey      string
	RequestID   string
	Fingerprint string
	// Status is "COMPLETED" for a committed outcome. A record is only ever written
	// COMPLETED, unless idemlab's RecordFirst inserts it "PROCESSING" and completes it in
	// the same transaction.
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

// Schema is the DDL of idempotency_records for MySQL 8 / MariaDB ("mysql"), SQLite ("sqlite")
// and PostgreSQL ("postgres"), keyed by gorm's dialector name: the one definition of the
// table; oncepay's migrations must produce exactly it (a test holds them equal). Statements
// are separated by ";\n". Keys compare byte for byte — VARBINARY on MySQL, which neither folds
// case nor pads trailing spaces; a deterministic collation on PostgreSQL — so CaseKey and
// casekey are two keys, as in Redis. (On PostgreSQL a key must be valid UTF-8 without NUL.)
var Schema = map[string]string{
	"mysql": `CREATE TABLE idempotency_records (
  id                BIGINT       NOT NULL PRIMARY KEY,
  scope             VARBINARY(128) NOT NULL,
  biz_type          VARBINARY(64)  NOT NULL,
  biz_key           VARBINARY(255) NOT NULL,
  request_id        VARCHAR(128) NOT NULL,
  fingerprint       CHAR(64)     NOT NULL,
  status            VARCHAR(16)  NOT NULL,
  response_status   INT          NOT NULL DEFAULT 0,
  response_headers  TEXT         NULL,
  response_body     MEDIUMBLOB   NULL,
  created_at        DATETIME(6)  NOT NULL,
  updated_at        DATETIME(6)  NOT NULL,
  expires_at        DATETIME(6)  NOT NULL,
  UNIQUE KEY uk_idempotency_key (scope, biz_type, biz_key),
  KEY idx_idempotency_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	"sqlite": `CREATE TABLE idempotency_records (
  id                INTEGER      NOT NULL PRIMARY KEY,
  scope             VARCHAR(128) NOT NULL,
  biz_type          VARCHAR(64)  NOT NULL,
  biz_key           VARCHAR(255) NOT NULL,
  request_id        VARCHAR(128) NOT NULL,
  fingerprint       CHAR(64)     NOT NULL,
  status            VARCHAR(16)  NOT NULL,
  response_status   INT          NOT NULL DEFAULT 0,
  response_headers  TEXT         NULL,
  response_body     BLOB         NULL,
  created_at        DATETIME     NOT NULL,
  updated_at        DATETIME     NOT NULL,
  expires_at        DATETIME     NOT NULL
);
CREATE UNIQUE INDEX uk_idempotency_key ON idempotency_records (scope, biz_type, biz_key);
CREATE INDEX idx_idempotency_created ON idempotency_records (created_at)`,
	"postgres": `CREATE TABLE idempotency_records (
  id                BIGINT       NOT NULL PRIMARY KEY,
  scope             VARCHAR(128) NOT NULL,
  biz_type          VARCHAR(64)  NOT NULL,
  biz_key           VARCHAR(255) NOT NULL,
  request_id        VARCHAR(128) NOT NULL,
  fingerprint       CHAR(64)     NOT NULL,
  status            VARCHAR(16)  NOT NULL,
  response_status   INT          NOT NULL DEFAULT 0,
  response_headers  TEXT         NULL,
  response_body     BYTEA        NULL,
  created_at        TIMESTAMP(6) NOT NULL,
  updated_at        TIMESTAMP(6) NOT NULL,
  expires_at        TIMESTAMP(6) NOT NULL,
  CONSTRAINT uk_idempotency_key UNIQUE (scope, biz_type, biz_key)
);
CREATE INDEX idx_idempotency_created ON idempotency_records (created_at)`,
}

// CreateSchema creates idempotency_records in db (Schema, in db's dialect) unless it exists:
// for a service without migrations of its own. A service with migrations puts Schema in them.
func CreateSchema(db *gorm.DB) error {
	if db.Migrator().HasTable(Record{}.TableName()) {
		return nil
	}
	ddl, ok := Schema[db.Dialector.Name()]
	if !ok {
		return fmt.Errorf("idempotent: no schema for the %s dialect; create idempotency_records like Schema's", db.Dialector.Name())
	}
	for _, stmt := range strings.Split(ddl, ";\n") {
		if err := db.Exec(stmt).Error; err != nil {
			return fmt.Errorf("idempotent: create idempotency_records: %w", err)
		}
	}
	return nil
}

func (g *Guard) newRecord(ctx context.Context, req Request) *Record {
	now := g.cfg.Now().UTC()
	return &Record{
		ID: g.cfg.NewID(), Scope: req.Key.Scope, BizType: req.Key.BizType, BizKey: req.Key.BizKey,
		RequestID: g.cfg.RequestID(ctx), Fingerprint: req.Fingerprint, Status: statusProcessing,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(g.cfg.Retention),
	}
}

// finish puts the outcome on the record, its headers cut to those replayed (replayable).
func (r *Record) finish(resp Response, now time.Time) {
	resp = resp.replayable()
	headers, _ := json.Marshal(resp.Header)
	r.Status = statusCompleted
	r.ResponseStatus = resp.Status
	r.ResponseHeaders = string(headers)
	r.ResponseBody = resp.Body
	r.UpdatedAt = now.UTC()
}

func (r Record) response() Response {
	resp := Response{Status: r.ResponseStatus, Body: r.ResponseBody}
	if r.ResponseHeaders != "" {
		_ = json.Unmarshal([]byte(r.ResponseHeaders), &resp.Header)
	}
	return resp
}

// insertSQL is the record's INSERT in the placeholder style of the database's dialect ("?",
// or "$1…" on PostgreSQL), written out: it runs on every new key, and gorm's reflection over
// the struct cost more than the statement's round trip on a loaded machine.
func insertSQL(dialect string) string {
	marks := strings.TrimSuffix(strings.Repeat("?,", 13), ",")
	if dialect == "postgres" {
		n := make([]string, 13)
		for i := range n {
			n[i] = "$" + strconv.Itoa(i+1)
		}
		marks = strings.Join(n, ",")
	}
	return "INSERT INTO idempotency_records (id, scope, biz_type, biz_key, request_id, fingerprint, status, " +
		"response_status, response_headers, response_body, created_at, updated_at, expires_at) VALUES (" + marks + ")"
}

// insertRecord inserts rec on db (a transaction, or the pool for a record stored alone). Its
// statement bypasses gorm, so the dialect's own translation of the error is applied here: a
// duplicate key is gorm.ErrDuplicatedKey (which the default Classify knows) whatever the
// gorm.Config, with the driver's error kept in the chain for a Classify of the caller's.
func (g *Guard) insertRecord(ctx context.Context, db *gorm.DB, rec *Record) error {
	_, err := db.Statement.ConnPool.ExecContext(ctx, g.insertSQL,
		rec.ID, rec.Scope, rec.BizType, rec.BizKey, rec.RequestID, rec.Fingerprint, rec.Status,
		rec.ResponseStatus, rec.ResponseHeaders, rec.ResponseBody, rec.CreatedAt, rec.UpdatedAt, rec.ExpiresAt)
	if t, ok := db.Dialector.(gorm.ErrorTranslator); ok && err != nil {
		if translated := t.Translate(err); translated != err {
			return fmt.Errorf("%w: %w", translated, err)
		}
	}
	return err
}

// loadRecord reads the committed record of key, outside any transaction.
func loadRecord(ctx context.Context, db *gorm.DB, k Key) (Record, bool, error) {
	var row recordRow // its times read whatever the driver's parseTime (recordRow)
	err := db.WithContext(ctx).
		Where("scope = ? AND biz_type = ? AND biz_key = ?", k.Scope, k.BizType, k.BizKey).
		Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Record{}, false, nil
	}
	return row.record(), err == nil, err
}

// Lookup returns the committed record of k, for operators and diagnosis.
func (g *Guard) Lookup(ctx context.Context, k Key) (Record, bool, error) {
	return loadRecord(ctx, g.db, k)
}

// inFlight reports whether an attempt at k holds its lease right now (idemops.InFlight).
func (g *Guard) inFlight(ctx context.Context, k Key) (bool, time.Duration, error) {
	if g.rdb == nil {
		return false, 0, nil // no lease to ask: a copy in flight is an uncommitted row
	}
	ttl, err := g.rdb.PTTL(ctx, g.leaseKey(k)).Result()
	if err != nil {
		return false, 0, err
	}
	return ttl > 0, max(ttl, 0), nil
}
