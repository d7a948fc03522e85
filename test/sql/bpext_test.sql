-- Test-only SQL functions of a bpext built with `make BPEXT_TEST_HOOKS=1`
-- (src/test_hooks.c), for the scale bench (test/bench/scale.sh) and the
-- tests of races (test/t/026_chain_cut_race.pl):
--   psql -v ON_ERROR_STOP=1 -f test/sql/bpext_test.sql
-- Not part of the extension: a release build has no such C functions, and
-- this script then fails.
CREATE OR REPLACE FUNCTION bpext_test_fill(npages bigint)
RETURNS bigint
AS '$libdir/bpext', 'bpext_test_fill'
LANGUAGE C STRICT VOLATILE;

CREATE OR REPLACE FUNCTION bpext_test_lookup_cost(n integer, hit boolean)
RETURNS double precision
AS '$libdir/bpext', 'bpext_test_lookup_cost'
LANGUAGE C STRICT VOLATILE;

CREATE OR REPLACE FUNCTION bpext_test_line_cost(n integer)
RETURNS double precision
AS '$libdir/bpext', 'bpext_test_line_cost'
LANGUAGE C STRICT VOLATILE;

CREATE OR REPLACE FUNCTION bpext_test_read_block(rel regclass, block bigint)
RETURNS bytea
AS '$libdir/bpext', 'bpext_test_read_block'
LANGUAGE C STRICT VOLATILE;

CREATE OR REPLACE FUNCTION bpext_test_page_crc(npages integer)
RETURNS text
AS '$libdir/bpext', 'bpext_test_page_crc'
LANGUAGE C STRICT VOLATILE;

REVOKE ALL ON FUNCTION bpext_test_fill(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_test_lookup_cost(integer, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_test_line_cost(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_test_read_block(regclass, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_test_page_crc(integer) FROM PUBLIC;
