-- +goose Up
-- The double-entry ledger; see the MySQL twin for the why.
CREATE TABLE ledger_transfers (
  id          TEXT    NOT NULL PRIMARY KEY,
  kind        TEXT    NOT NULL,
  pending_id  TEXT    NULL,
  capture_id  TEXT    NULL,
  channel     TEXT    NOT NULL,
  number      TEXT    NOT NULL,
  amount      INTEGER NOT NULL,
  created_at  DATETIME NOT NULL
);
CREATE UNIQUE INDEX uk_ledger_transfers_pending ON ledger_transfers (pending_id);
CREATE INDEX idx_ledger_transfers_number ON ledger_transfers (channel, number);
CREATE INDEX idx_ledger_transfers_capture ON ledger_transfers (capture_id);
CREATE INDEX idx_ledger_transfers_created ON ledger_transfers (created_at);

CREATE TABLE ledger_postings (
  id           INTEGER NOT NULL PRIMARY KEY,
  transfer_id  TEXT    NOT NULL,
  account      TEXT    NOT NULL,
  amount       INTEGER NOT NULL,
  pending      BOOLEAN NOT NULL,
  created_at   DATETIME NOT NULL
);
CREATE UNIQUE INDEX uk_ledger_postings_transfer_account ON ledger_postings (transfer_id, account);
CREATE INDEX idx_ledger_postings_account ON ledger_postings (account, id);

-- +goose Down
DROP TABLE ledger_postings;
DROP TABLE ledger_transfers;
