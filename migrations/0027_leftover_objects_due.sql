-- An object is noted before it is written (due a day later), and the statement that stores the
-- row naming it takes the note back: a request that ends between the two (a Lambda timeout, a
-- lost connection) leaves an object the housekeeping deletes once the note is due. Objects
-- whose rows are gone stay due at once, as before.
ALTER TABLE leftover_objects ADD COLUMN due_at timestamptz NOT NULL DEFAULT now();
