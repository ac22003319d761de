-- Objects whose rows are gone but whose delete failed (storage briefly unreachable): kept here
-- until the daily housekeeping deletes them, so a passing failure leaves no file for good.
CREATE TABLE leftover_objects (
    storage_key text PRIMARY KEY,
    noted_at timestamptz NOT NULL DEFAULT now()
);
