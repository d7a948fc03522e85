--
-- Installing bpext and turning the tier on.
--
CREATE EXTENSION bpext;

-- Preloaded, but no tier configured yet: one row, disabled.
SELECT file_id, state, state_description, current_size_in_kb
  FROM bpext_configuration;

-- Turn it on, with the file in the data directory (the path is not shown
-- because it differs from run to run).  map_bytes_per_page is exact, to
-- two decimals: at bpext.max_size = 256MB the fixed 256 kB of write
-- counters add 8 bytes per page to the map's 32.
SELECT bpext_enable(current_setting('data_directory') || '/bpext_regress.tier',
                    '32MB');
SELECT path = current_setting('data_directory') || '/bpext_regress.tier' AS path_ok,
       file_id, state, state_description, current_size_in_kb,
       max_size_in_kb, map_bytes_per_page,
       last_error
  FROM bpext_configuration;

-- The view columns, in order, as SQL Server names them.
SELECT attname FROM pg_attribute
 WHERE attrelid = 'bpext_configuration'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT attname FROM pg_attribute
 WHERE attrelid = 'bpext_stats'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT attname FROM pg_attribute
 WHERE attrelid = 'bpext_buffer_descriptors'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT attname FROM pg_attribute
 WHERE attrelid = 'bpext_database_stats'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT attname FROM pg_attribute
 WHERE attrelid = 'bpext_relation_buffers'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT attname FROM pg_attribute
 WHERE attrelid = 'bpext_scan_history'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT attname FROM pg_attribute
 WHERE attrelid = 'bpext_buffer_summary'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT attname FROM pg_attribute
 WHERE attrelid = 'bpext_database_buffers'::regclass AND attnum > 0
 ORDER BY attnum;
