-- The operator token when none is configured; migrations/sqlite's migration of the same name says what the row
-- holds.
CREATE TABLE gateway_admin_token (
    id BIGINT PRIMARY KEY NOT NULL CHECK (id = 1),
    token_hash TEXT NOT NULL,
    set_at TIMESTAMP NOT NULL
);
