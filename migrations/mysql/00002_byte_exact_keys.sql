-- +goose Up
-- Keys compare byte for byte (docs/contract.md): idempotency keys, SKUs, channels, trade numbers,
-- user names and ledger facts. MySQL's default collation ignores case and trailing spaces, so
-- `casekey-1` replayed `CaseKey-1`'s recharge and `sku-1001` updated `SKU-1001`, while SQLite
-- (and Redis) kept them apart. VARBINARY compares bytes with no padding on MySQL 8 and
-- MariaDB alike; every value here is validated to fit its byte length before it is written.
ALTER TABLE users               MODIFY name     VARBINARY(64)  NOT NULL;
ALTER TABLE inventory           MODIFY sku      VARBINARY(64)  NOT NULL;
ALTER TABLE inventory_movements MODIFY sku      VARBINARY(64)  NOT NULL;
ALTER TABLE orders              MODIFY channel  VARBINARY(64)  NULL,
                                MODIFY trade_no VARBINARY(128) NULL;
ALTER TABLE order_items         MODIFY sku      VARBINARY(64)  NOT NULL;
ALTER TABLE payments            MODIFY channel  VARBINARY(64)  NOT NULL,
                                MODIFY trade_no VARBINARY(128) NOT NULL;
ALTER TABLE recharges           MODIFY channel  VARBINARY(64)  NULL,
                                MODIFY trade_no VARBINARY(128) NULL;
ALTER TABLE account_ledger      MODIFY biz_type VARBINARY(32)  NOT NULL,
                                MODIFY biz_id   VARBINARY(128) NOT NULL;
ALTER TABLE idempotency_records MODIFY scope    VARBINARY(128) NOT NULL,
                                MODIFY biz_type VARBINARY(64)  NOT NULL,
                                MODIFY biz_key  VARBINARY(255) NOT NULL;
ALTER TABLE anomalies           MODIFY kind     VARBINARY(64)  NOT NULL,
                                MODIFY channel  VARBINARY(64)  NOT NULL,
                                MODIFY trade_no VARBINARY(128) NOT NULL;

-- +goose Down
ALTER TABLE anomalies           MODIFY kind VARCHAR(64) NOT NULL, MODIFY channel VARCHAR(64) NOT NULL, MODIFY trade_no VARCHAR(128) NOT NULL;
ALTER TABLE idempotency_records MODIFY scope VARCHAR(128) NOT NULL, MODIFY biz_type VARCHAR(64) NOT NULL, MODIFY biz_key VARCHAR(255) NOT NULL;
ALTER TABLE account_ledger      MODIFY biz_type VARCHAR(32) NOT NULL, MODIFY biz_id VARCHAR(128) NOT NULL;
ALTER TABLE recharges           MODIFY channel VARCHAR(64) NULL, MODIFY trade_no VARCHAR(128) NULL;
ALTER TABLE payments            MODIFY channel VARCHAR(64) NOT NULL, MODIFY trade_no VARCHAR(128) NOT NULL;
ALTER TABLE order_items         MODIFY sku VARCHAR(64) NOT NULL;
ALTER TABLE orders              MODIFY channel VARCHAR(64) NULL, MODIFY trade_no VARCHAR(128) NULL;
ALTER TABLE inventory_movements MODIFY sku VARCHAR(64) NOT NULL;
ALTER TABLE inventory           MODIFY sku VARCHAR(64) NOT NULL;
ALTER TABLE users               MODIFY name VARCHAR(64) NOT NULL;
