-- How many chunks of each knowledge base hold each full-text word (document frequency), kept
-- exact by triggers on `chunks`, whatever writes them: the pipeline, chunk edits, deletes of
-- chunks, documents or bases. Full-text search reads it to tell rare words (whose index lists
-- are short and decide the ranking) from words found in most of a base's chunks (whose lists
-- are long and carry almost no evidence). `term = ''` holds the base's count of chunks with a
-- text index entry; no real word is empty.
--
-- No foreign key to `knowledge_bases`: deleting a base deletes its chunks, whose trigger
-- counts every word down to zero and removes the rows.
CREATE TABLE rag_terms (
    rag_id BIGINT NOT NULL,
    term   TEXT   NOT NULL,
    chunks INT    NOT NULL,
    PRIMARY KEY (rag_id, term)
);

-- Adds `sign` x the words of each (base, tsvector) pair. Writers of one base take the base's
-- lock first, so two documents indexed at once cannot deadlock on the words they share;
-- writers of different bases never wait on each other.
CREATE FUNCTION rag_terms_add(sign INT, bases BIGINT[], vectors TSVECTOR[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    gone_bases BIGINT[];
    gone_terms TEXT[];
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('rag-terms:' || b))
    FROM (SELECT DISTINCT b FROM unnest(bases) AS b ORDER BY b) AS locked;

    WITH delta AS (
        SELECT r.rag_id, w.term, sign * count(*)::int AS n
        FROM unnest(bases, vectors) AS r(rag_id, tsv),
             LATERAL (SELECT '' AS term UNION ALL SELECT unnest(tsvector_to_array(r.tsv))) AS w
        WHERE r.tsv IS NOT NULL
        GROUP BY r.rag_id, w.term
    ),
    counted AS (
        INSERT INTO rag_terms AS t (rag_id, term, chunks)
        SELECT rag_id, term, n FROM delta ORDER BY rag_id, term
        ON CONFLICT (rag_id, term) DO UPDATE SET chunks = t.chunks + excluded.chunks
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

CREATE FUNCTION chunks_count_terms() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    old_bases BIGINT[];
    old_vectors TSVECTOR[];
    new_bases BIGINT[];
    new_vectors TSVECTOR[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(rag_id), array_agg(tsv) INTO new_bases, new_vectors
        FROM new_rows WHERE tsv IS NOT NULL;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(rag_id), array_agg(tsv) INTO old_bases, old_vectors
        FROM old_rows WHERE tsv IS NOT NULL;
    ELSE
        -- Most updates (embeddings, status) leave the text alone and count nothing.
        SELECT array_agg(o.rag_id) FILTER (WHERE o.tsv IS NOT NULL),
               array_agg(o.tsv) FILTER (WHERE o.tsv IS NOT NULL),
               array_agg(n.rag_id) FILTER (WHERE n.tsv IS NOT NULL),
               array_agg(n.tsv) FILTER (WHERE n.tsv IS NOT NULL)
        INTO old_bases, old_vectors, new_bases, new_vectors
        FROM old_rows o JOIN new_rows n ON n.id = o.id
        WHERE n.tsv IS DISTINCT FROM o.tsv;
    END IF;
    IF old_bases IS NOT NULL THEN
        PERFORM rag_terms_add(-1, old_bases, old_vectors);
    END IF;
    IF new_bases IS NOT NULL THEN
        PERFORM rag_terms_add(1, new_bases, new_vectors);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER chunks_terms_insert AFTER INSERT ON chunks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION chunks_count_terms();
CREATE TRIGGER chunks_terms_update AFTER UPDATE ON chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION chunks_count_terms();
CREATE TRIGGER chunks_terms_delete AFTER DELETE ON chunks
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION chunks_count_terms();

-- Bases indexed before this migration.
INSERT INTO rag_terms (rag_id, term, chunks)
SELECT c.rag_id, w.term, count(*)
FROM chunks c, LATERAL (SELECT '' AS term UNION ALL SELECT unnest(tsvector_to_array(c.tsv))) AS w
WHERE c.tsv IS NOT NULL
GROUP BY c.rag_id, w.term;
