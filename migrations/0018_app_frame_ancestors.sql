-- The pages that may frame an app's embedded chat page (CSP frame-ancestors); empty = any.
ALTER TABLE apps ADD COLUMN IF NOT EXISTS frame_ancestors TEXT[] NOT NULL DEFAULT '{}';
