-- searchParams.enterRerankCount is now 1-200, what search hands a reranker (it accepted up to
-- 500 and used 200). A base saved above it would fail the check on its next config edit,
-- whatever the edit changed, so stored values are brought to the limit search already used.
UPDATE knowledge_bases
SET search_params = jsonb_set(search_params, '{enterRerankCount}', '200')
WHERE jsonb_typeof(search_params -> 'enterRerankCount') = 'number'
  AND (search_params ->> 'enterRerankCount')::numeric > 200;
