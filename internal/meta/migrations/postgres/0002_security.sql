-- Data feed keys: sender credentials, stored only hashed. A key belongs to
-- an account (the owner named in the AccountId header); its attributes are
-- applied to every stream it sends. hint is a few leading characters of the
-- key so that an operator can tell keys apart; it cannot authenticate.
CREATE TABLE datafeed_keys (
    id          BIGSERIAL PRIMARY KEY,
    account     TEXT    NOT NULL,
    hint        TEXT    NOT NULL,
    hash        TEXT    NOT NULL,
    salt        TEXT    NOT NULL DEFAULT '',
    algorithm   TEXT    NOT NULL,
    expires_ms  BIGINT  NOT NULL,
    attributes  TEXT    NOT NULL DEFAULT '{}',
    create_ms   BIGINT  NOT NULL,
    revoked_ms  BIGINT  NOT NULL DEFAULT 0
);
CREATE INDEX datafeed_keys_account ON datafeed_keys (account);

-- Users and groups share one table; groups nest through group_members.
CREATE TABLE users (
    id           BIGSERIAL PRIMARY KEY,
    name         TEXT    COLLATE "C" NOT NULL UNIQUE,
    display_name TEXT    NOT NULL DEFAULT '',
    is_group     INTEGER NOT NULL DEFAULT 0,
    enabled      INTEGER NOT NULL DEFAULT 1,
    create_ms    BIGINT  NOT NULL,
    update_ms    BIGINT  NOT NULL
);

CREATE TABLE group_members (
    group_id  BIGINT  NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    member_id BIGINT  NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    PRIMARY KEY (group_id, member_id)
);
CREATE INDEX group_members_member ON group_members (member_id);

-- Application permissions held directly by a user or group.
CREATE TABLE app_permissions (
    user_id    BIGINT  NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    permission TEXT    NOT NULL,
    PRIMARY KEY (user_id, permission)
);

-- Per-feed permission: the highest level held (USE 10 < VIEW 20 < EDIT 30 < DELETE 40 < OWNER 50).
CREATE TABLE feed_permissions (
    user_id BIGINT  NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    feed    TEXT    NOT NULL,
    level   INTEGER NOT NULL,
    PRIMARY KEY (user_id, feed)
);
CREATE INDEX feed_permissions_feed ON feed_permissions (feed);

-- API keys: sak_<10 hex checksum>_<128 Base58>. Only the SHA-256 of the whole
-- key is kept, with its visible prefix sak_<checksum>_ for listings.
CREATE TABLE api_keys (
    id           BIGSERIAL PRIMARY KEY,
    prefix       TEXT    NOT NULL,
    hash         TEXT    NOT NULL UNIQUE,
    owner_id     BIGINT  NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT    NOT NULL,
    comments     TEXT    NOT NULL DEFAULT '',
    expires_ms   BIGINT  NOT NULL,
    enabled      INTEGER NOT NULL DEFAULT 1,
    last_used_ms BIGINT  NOT NULL DEFAULT 0,
    create_ms    BIGINT  NOT NULL,
    UNIQUE (owner_id, name)
);
