-- Agent tokens may expire (DESIGN §14): `expires_at` is set when the credential was issued with `expires_in_s`, NULL
-- when it never expires. Read with the row on every credential lookup (by primary key); nothing queries by it.
ALTER TABLE agent_credentials ADD COLUMN expires_at DATETIME;
