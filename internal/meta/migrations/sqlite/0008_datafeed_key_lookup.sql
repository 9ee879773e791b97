-- A data feed key can be found without its owner: lookup is the SHA-256
-- of the key (hex), safe to store because the key is ~750 random bits.
-- Keys created before this migration have none and are found by their
-- owner (the AccountId header) only, as are keys from identity files.
ALTER TABLE datafeed_keys ADD COLUMN lookup TEXT NOT NULL DEFAULT '';
CREATE INDEX datafeed_keys_lookup ON datafeed_keys (lookup) WHERE lookup <> '';
