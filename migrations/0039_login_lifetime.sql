-- When a login ends whatever its refreshes: each refresh token of the login expires by then.
-- NULL for logins made before it was kept; their next refresh gives them one.
ALTER TABLE refresh_tokens ADD COLUMN login_expires_at TIMESTAMPTZ;
