-- Addresses each account logged in from successfully. The account-wide failure limit does not
-- apply to them, so someone failing logins from many other addresses cannot lock the owner out
-- of an address they are known to use. Kept for 30 days after the last login there.
CREATE TABLE login_known_addresses (
    user_id    BIGINT      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    address    TEXT        NOT NULL,
    last_login TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, address)
);

-- Carried in every access token and compared on every authenticated request: bumping it ends
-- every access token issued before (a password change, a revoked login), not only when they expire.
ALTER TABLE users ADD COLUMN token_version BIGINT NOT NULL DEFAULT 0;
