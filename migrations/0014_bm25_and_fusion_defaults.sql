-- Okapi BM25 for the built-in full-text search needs, besides each word's document frequency
-- (`rag_terms.chunks`), the length of each chunk and the average length of its base. A chunk's
-- length is the number of word positions in its `tsvector` (the service writes every word
-- with its positions); the base's total is kept on its `term = ''` row, beside its chunk
-- count, by the same triggers, so every write path counts.

-- Words in a `tsvector`, repeats included (a word without positions counts once).
CREATE FUNCTION tsvector_token_count(tsvector) RETURNS BIGINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT coalesce(sum(greatest(cardinality(positions), 1)), 0)::int8 FROM unnest($1) $$;

ALTER TABLE rag_terms ADD COLUMN tokens BIGINT NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION rag_terms_add(sign INT, bases BIGINT[], vectors TSVECTOR[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    gone_bases BIGINT[];
    gone_terms TEXT[];
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('rag-terms:' || b))
    FROM (SELECT DISTINCT b FROM unnest(bases) AS b ORDER BY b) AS locked;

    WITH delta AS (
        SELECT r.rag_id, w.term, sign * count(*)::int AS n, sign * sum(w.tokens)::int8 AS tokens
        FROM unnest(bases, vectors) AS r(rag_id, tsv),
             LATERAL (SELECT '' AS term, tsvector_token_count(r.tsv) AS tokens
                      UNION ALL SELECT unnest(tsvector_to_array(r.tsv)), 0) AS w
        WHERE r.tsv IS NOT NULL
        GROUP BY r.rag_id, w.term
    ),
    counted AS (
        INSERT INTO rag_terms AS t (rag_id, term, chunks, tokens)
        SELECT rag_id, term, n, tokens FROM delta ORDER BY rag_id, term
        ON CONFLICT (rag_id, term) DO UPDATE
            SET chunks = t.chunks + excluded.chunks, tokens = t.tokens + excluded.tokens
        RETURNING t.rag_id, t.term, t.chunks
    )
    SELECT array_agg(rag_id), array_agg(term) INTO gone_bases, gone_terms
    FROM counted WHERE chunks <= 0;

    IF gone_bases IS NOT NULL THEN
        DELETE FROM rag_terms t
        USING unnest(gone_bases, gone_terms) AS g(rag_id, term)
        WHERE t.rag_id = g.rag_id AND t.term = g.term;
    END IF;
END
$$;

-- Bases indexed before this migration.
UPDATE rag_terms t SET tokens = s.tokens
FROM (SELECT rag_id, sum(tsvector_token_count(tsv))::int8 AS tokens FROM chunks
      WHERE tsv IS NOT NULL GROUP BY rag_id) s
WHERE t.rag_id = s.rag_id AND t.term = '';

-- New memory configs fuse like new knowledge bases (see `fusion::DEFAULT_STRATEGY`); stored
-- configs keep the strategy they were saved with.
ALTER TABLE memory_configs ALTER COLUMN fusion_strategy SET DEFAULT 'WEIGHTED_SUM',
                           ALTER COLUMN dense_weight SET DEFAULT 0.9;
