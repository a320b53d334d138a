-- +goose Up
-- The double-entry ledger (internal/ledger). A transfer is one business fact's movement of
-- money; its id is derived from the fact (the channel's trade, the refund's out_refund_no), so
-- that the primary key is the fence that outlives the dedup record's purge. Its postings sum
-- to zero. Ids and account codes are byte-exact (VARBINARY), like every key in this schema.
CREATE TABLE ledger_transfers (
  id          VARBINARY(200) NOT NULL PRIMARY KEY,
  kind        VARCHAR(16)    NOT NULL,
  pending_id  VARBINARY(200) NULL,
  capture_id  VARBINARY(200) NULL,
  channel     VARBINARY(64)  NOT NULL,
  number      VARBINARY(128) NOT NULL,
  amount      BIGINT         NOT NULL,
  created_at  DATETIME(6)    NOT NULL,
  UNIQUE KEY uk_ledger_transfers_pending (pending_id),
  KEY idx_ledger_transfers_number (channel, number),
  KEY idx_ledger_transfers_capture (capture_id),
  KEY idx_ledger_transfers_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE ledger_postings (
  id           BIGINT         NOT NULL PRIMARY KEY,
  transfer_id  VARBINARY(200) NOT NULL,
  account      VARBINARY(128) NOT NULL,
  amount       BIGINT         NOT NULL,
  pending      BOOLEAN        NOT NULL,
  created_at   DATETIME(6)    NOT NULL,
  UNIQUE KEY uk_ledger_postings_transfer_account (transfer_id, account),
  KEY idx_ledger_postings_account (account, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- +goose Down
DROP TABLE ledger_postings;
DROP TABLE ledger_transfers;
