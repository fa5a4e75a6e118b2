-- The operator token when none is configured (docs/operations.md, "Rotating the admin token"): the SHA-256 of the
-- token, never the token, and when it was generated. One row: the first gateway to start stores it (insert if
-- absent, so two starting together cannot both), `gateway admin-token rotate` replaces it.
CREATE TABLE gateway_admin_token (
    id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    token_hash TEXT NOT NULL,
    set_at DATETIME NOT NULL
);
