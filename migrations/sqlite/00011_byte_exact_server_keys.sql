-- +goose Up
-- SQLite's default BINARY collation already compares every key byte for byte: this migration
-- exists so that both dialects carry the same versions; the MySQL one turns the remaining
-- string columns of primary and unique keys into VARBINARY.
SELECT 1;

-- +goose Down
SELECT 1;
