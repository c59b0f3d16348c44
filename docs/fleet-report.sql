-- The fleet report's per-job counts, as DuckDB reads the records themselves:
-- the processes that ran a backward pass (a restarted rank once per job,
-- host and rank; torchrun agents, processes without a backward pass and
-- disabled libraries left out), and how many of them raised each event.
-- test/test_fleet_report_reader.py checks that it gives the report's counts.
--   duckdb -c "$(sed 's|records/\*.json|/shared/adl-records/*.json|' docs/fleet-report.sql)"
--
-- The columns are named and typed rather than detected: a column that is
-- null in every record (disabled_reason, in a healthy fleet) would be
-- detected as JSON, and fields a newer minor version adds are not read.
-- Files that are not JSON objects are skipped, as the report skips them.
WITH records AS (
  SELECT * FROM read_json(
    'records/*.json',
    format = 'auto',
    ignore_errors = true,
    columns = {
      schema: 'VARCHAR', job: 'VARCHAR', role: 'VARCHAR', "rank": 'BIGINT',
      host: 'VARCHAR', pid: 'BIGINT', start_time: 'VARCHAR',
      events: 'VARCHAR[]', ran_backward: 'BOOLEAN', disabled_reason: 'VARCHAR'
    })
),
counted AS (
  SELECT
    job,
    CASE
      WHEN role = 'rank' AND "rank" IS NOT NULL
        THEN 'rank ' || host || ' ' || CAST("rank" AS VARCHAR)
      ELSE 'process ' || host || ' ' || CAST(pid AS VARCHAR) || ' ' || start_time
    END AS process,
    events
  FROM records
  WHERE starts_with(schema, '2.') AND job IS NOT NULL AND role <> 'agent'
    AND coalesce(disabled_reason, '') = '' AND ran_backward
)
SELECT
  job,
  count(DISTINCT process) AS processes,
  count(DISTINCT process) FILTER (
    WHERE list_contains(events, 'torch.autograd.multidevice_backward')) AS multidevice,
  count(DISTINCT process) FILTER (
    WHERE list_contains(events, 'torch.autograd.gpu_cpu_backward')) AS gpu_cpu
FROM counted
GROUP BY job
ORDER BY job;
