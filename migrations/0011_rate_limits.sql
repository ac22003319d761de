-- Request counters for rate limiting, one row per caller (`u:<user id>` or `a:<app id>`) holding
-- the current fixed window. Unlogged: no WAL per request, and losing the counts in a crash
-- only resets the windows. The row count is bounded by users + apps, so nothing to clean up.
CREATE UNLOGGED TABLE rate_limit_windows (
    key          TEXT PRIMARY KEY,
    window_start TIMESTAMPTZ NOT NULL,
    hits         INT         NOT NULL
);
