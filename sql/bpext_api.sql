--
-- The SQL surface: prewarm, resize, counters, and the errors a DBA meets.
--
CREATE TABLE prewarm_me (id int PRIMARY KEY, filler text);
INSERT INTO prewarm_me
  SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, 20000) g;
CHECKPOINT;

-- The checkpoint's writes went into the tier too (dual write); start from
-- an empty tier to see prewarm at work.
SELECT bpext_disable();
-- Once off, turning it on again needs a size.
SELECT bpext_enable();
SELECT bpext_enable(size => '32MB');

-- Everything not yet in the tier is loaded; a second call finds it there.
SELECT bpext_prewarm('prewarm_me') > 0 AS loaded_some;
SELECT bpext_prewarm('prewarm_me');
SELECT bpext_prewarm('prewarm_me_pkey', 'main') > 0 AS index_loaded;

-- Contents read back match what was written.
SELECT count(*), sum(length(filler)) FROM prewarm_me;

-- Counters add up.
SELECT lookups = hits + misses AS lookups_add_up,
       extension_allocated_pages + extension_free_pages = 32 * 1024 / 8 - 1
         AS pages_add_up,
       bytes_read = extension_page_reads * 8192 AS bytes_add_up,
       pages_prewarmed > 0 AS prewarm_counted,
       crc_failures, io_errors
  FROM bpext_stats;

-- The descriptors view sees the same tier pages as the counters, and the
-- prewarmed table's pages are on SSD, found through allocation_unit_id.
-- (within the churn of the worker pushing pages between the two scans)
SELECT abs((SELECT count(*) FROM bpext_buffer_descriptors
             WHERE is_in_bpool_extension) - extension_allocated_pages) <= 8
         AS counts_match
  FROM bpext_stats;
SELECT count(*) = pg_relation_size('prewarm_me') / 8192 AS all_pages_on_ssd
  FROM bpext_buffer_descriptors d
  JOIN pg_class c ON c.relfilenode = d.allocation_unit_id
 WHERE c.relname = 'prewarm_me' AND d.is_in_bpool_extension;
SELECT page_type, count(*) > 0 AS present
  FROM bpext_buffer_descriptors(true) d
  JOIN pg_class c ON c.relfilenode = d.allocation_unit_id
 WHERE c.relname IN ('prewarm_me', 'prewarm_me_pkey') AND d.is_in_bpool_extension
 GROUP BY page_type ORDER BY page_type;
SELECT ssd_pages = pg_relation_size('prewarm_me') / 8192 AS per_relation
  FROM bpext_relation_buffers
 WHERE relation = 'prewarm_me'::regclass AND relforknumber = 0;

-- The summary, counted inside the scan workers, agrees with the listing:
-- per relation fork, and in total with the counters (within the churn of
-- the worker pushing pages between the scans).
SELECT s.ssd_pages = pg_relation_size('prewarm_me') / 8192 AS all_on_ssd,
       s.dirty_pages <= s.ram_pages AS dirty_in_ram,
       s.datname = current_database() AS db
  FROM bpext_buffer_summary s
 WHERE s.relation = 'prewarm_me'::regclass AND s.relforknumber = 0
   AND s.ram_pages = (SELECT count(*) FROM bpext_buffer_descriptors d
                       JOIN pg_class c ON c.relfilenode = d.allocation_unit_id
                      WHERE c.relname = 'prewarm_me' AND d.relforknumber = 0
                        AND NOT d.is_in_bpool_extension);
SELECT abs(sum(ssd_pages) - (SELECT extension_allocated_pages FROM bpext_stats)) <= 8
         AS ssd_matches_counters,
       abs(sum(ssd_pages) - (SELECT count(*) FROM bpext_buffer_descriptors
                              WHERE is_in_bpool_extension)) <= 8
         AS ssd_matches_listing,
       abs(sum(ram_pages) - (SELECT count(*) FROM bpext_buffer_descriptors
                              WHERE NOT is_in_bpool_extension)) <= 8
         AS ram_matches_listing
  FROM bpext_buffer_summary;
SELECT (SELECT sum(ssd_pages) FROM bpext_database_buffers) =
       (SELECT sum(ssd_pages) FROM bpext_buffer_summary) AS databases_add_up,
       (SELECT count(*) FROM bpext_database_buffers
         WHERE datname = current_database() AND ssd_pages > 0) AS this_db;

-- Reads are counted per database; a reset zeroes the counters.  The
-- check runs once before the reset, so that the catalog pages it reads
-- (a first read of one is a lookup) are in shared buffers after it.
SELECT tier_reads + data_file_reads > 0 AS counted
  FROM bpext_database_stats WHERE datname = current_database();
\o /dev/null
SELECT extension_page_reads, lookups, pages_prewarmed,
       stats_reset > now() - interval '1 minute' AS just_reset
  FROM bpext_stats;
\o
SELECT bpext_stats_reset();
SELECT extension_page_reads, lookups, pages_prewarmed,
       stats_reset > now() - interval '1 minute' AS just_reset
  FROM bpext_stats;

-- Errors.
SELECT bpext_prewarm('prewarm_me', 'init');
SELECT bpext_prewarm('prewarm_me', 'nosuchfork');
CREATE TEMP TABLE temp_t (a int);
SELECT bpext_prewarm('temp_t');
CREATE VIEW a_view AS SELECT 1 AS one;
SELECT bpext_prewarm('a_view');
SELECT bpext_resize('1TB');
SELECT bpext_enable(size => '1TB');
ALTER SYSTEM SET bpext.size = '1TB';
SELECT bpext_resize('banana');
SELECT bpext_resize('0');
SELECT bpext_enable('relative/path.tier', '10MB');
SET bpext.size = '10MB';
SET bpext.nonexistent = 1;

-- Online resize, both ways.
SELECT bpext_resize('48MB');
SELECT current_size_in_kb FROM bpext_configuration;
SELECT bpext_resize('16MB');
SELECT current_size_in_kb, allocated_pages <= 16 * 1024 / 8 - 1 AS fits
  FROM bpext_configuration;
SELECT count(*), sum(length(filler)) FROM prewarm_me;

-- Monitoring is for pg_monitor, changes are for superusers.
CREATE ROLE bpext_nobody;
CREATE ROLE bpext_watcher IN ROLE pg_monitor;
SET ROLE bpext_nobody;
SELECT state FROM bpext_configuration;
SELECT count(*) FROM bpext_sizing;
SELECT bpext_disable();
SET ROLE bpext_watcher;
SELECT state, state_description FROM bpext_configuration;
SELECT crc_failures FROM bpext_stats;
SELECT count(*) >= 0 AS readable FROM bpext_buffer_descriptors;
SELECT count(*) > 0 AS readable FROM bpext_buffer_summary;
SELECT count(*) > 0 AS readable FROM bpext_database_buffers;
SELECT count(*) > 0 AS readable FROM bpext_sizing;
SELECT count(*) AS readable FROM bpext_sizing_window;
SELECT bpext_sizing_reset();
SELECT bpext_stats_reset();
SELECT bpext_enable();
SELECT bpext_resize('20MB');
RESET ROLE;
DROP ROLE bpext_nobody;
DROP ROLE bpext_watcher;

-- Off and on again.
SELECT bpext_disable();
SELECT state, state_description, current_size_in_kb, allocated_pages
  FROM bpext_configuration;
SELECT bpext_prewarm('prewarm_me');
-- With the tier off the summary counts shared buffers only.
SELECT count(*) > 0 AS some_ram, sum(ssd_pages) AS ssd_pages,
       sum(ram_pages) > 0 AS ram_pages
  FROM bpext_buffer_summary;
SELECT bpext_enable(size => '32MB');
SELECT state_description FROM bpext_configuration;
SELECT count(*), sum(length(filler)) FROM prewarm_me;

-- The sizing advisor's curve: a doubling series of tier sizes from an
-- eighth of shared_buffers (16MB here) with the current tier's size in
-- it, hit ratios that never go down, and the map's 32 bytes a page.
SELECT min(tier_pages) AS first_row,
       bool_and(hit_ratio BETWEEN 0 AND 1) AS ratios,
       bool_and(reads_saved_per_second >= 0) AS savings,
       bool_or(tier_pages = (SELECT current_size_in_kb / 8 - 1
                               FROM bpext_configuration)) AS current_tier_row
  FROM bpext_sizing;
SELECT bool_and(hit_ratio >= prev_ratio) AS monotone,
       bool_and(tier_pages > prev_pages) AS increasing,
       bool_and(map_bytes BETWEEN 30 * tier_pages AND 40 * tier_pages)
         FILTER (WHERE tier_pages >= 65536) AS map_32_bytes_a_page
  FROM (SELECT tier_pages, hit_ratio, map_bytes,
               lag(hit_ratio, 1, 0.0) OVER w AS prev_ratio,
               lag(tier_pages, 1, 0::bigint) OVER w AS prev_pages
          FROM bpext_sizing WINDOW w AS (ORDER BY tier_pages)) s;
-- A new window starts at the default rate (1).  The bpext worker's pass
-- over shared buffers counts against bpext.sizing_samples_per_second, so
-- on a server with more buffers than that (installcheck) the rate may be
-- cut before this looks.
SELECT bpext_sizing_reset();
SELECT seconds < 60 AS new_window,
       sample_rate = 1 OR
       (SELECT setting::bigint FROM pg_settings WHERE name = 'shared_buffers') >
       current_setting('bpext.sizing_samples_per_second')::bigint AS default_rate,
       sample_capacity > 50000 AS four_mb_budget
  FROM bpext_sizing_window;

-- bpext_explain_tier(): a row per plan node, the top node (the plan's
-- totals) first; at each node counted, the tier hits and data-file reads
-- make up PostgreSQL's own shared read count.  One plannable statement.
SET max_parallel_workers_per_gather = 0;
SELECT node, parent_node, level, node_type, relation,
       tier_hits + data_file_reads = shared_read AS adds_up
  FROM bpext_explain_tier('SELECT count(*) FROM prewarm_me');
RESET max_parallel_workers_per_gather;
SELECT * FROM bpext_explain_tier('SELECT 1; SELECT 2');
SELECT * FROM bpext_explain_tier('VACUUM prewarm_me');
