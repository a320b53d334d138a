-- +goose Up
-- Keys compare byte for byte (docs/contract.md). SQLite's default BINARY collation already does:
-- this migration exists so that both dialects carry the same versions; the MySQL one turns
-- the key columns into VARBINARY.
SELECT 1;

-- +goose Down
SELECT 1;
