# bpext: a second buffer tier on a local SSD, below shared_buffers.

MODULE_big = bpext
OBJS = \
	src/adaptive_admission.o \
	src/bpext.o \
	src/buffer_ops.o \
	src/db_hooks.o \
	src/descriptors.o \
	src/evict_push.o \
	src/explain_function.o \
	src/explain_tier.o \
	src/free_space.o \
	src/helper_io.o \
	src/interpose.o \
	src/io_watch.o \
	src/page_crc.o \
	src/prewarm.o \
	src/progress.o \
	src/query_reads.o \
	src/reader_ring.o \
	src/scan_pool.o \
	src/settings.o \
	src/sizing.o \
	src/sizing_mini.o \
	src/slot_directory.o \
	src/smgr_wrap.o \
	src/smgr_wrap_block.o \
	src/smgr_wrap_vectored.o \
	src/smgr_wrap_aio.o \
	src/sql_api.o \
	src/stats.o \
	src/store_queue.o \
	src/summary.o \
	src/tier_control.o \
	src/tier_file.o \
	src/tier_io.o \
	src/tier_map.o \
	src/tier_map_index.o \
	src/tier_map_rels.o \
	src/tier_map_slots.o \
	src/tier_map_walks.o \
	src/tier_scans.o \
	src/tier_readers.o \
	src/tier_writer.o \
	src/wait_events.o \
	src/warm_datadir.o \
	src/warm_restart.o \
	src/worker.o \
	src/worker_children.o

# Test builds only (`make BPEXT_TEST_HOOKS=1`): the scale bench's sparse
# tier file and synthetic map fill (src/test_hooks.c, test/sql/bpext_test.sql).
# Packages and `make dist` never set it; it counts only on the command line,
# so an environment variable cannot turn it on in a package build.
ifeq ($(origin BPEXT_TEST_HOOKS)$(BPEXT_TEST_HOOKS),command line1)
OBJS += src/test_hooks.o
PG_CPPFLAGS += -DBPEXT_TEST_HOOKS
endif
# A release build's clean must remove a hook build's objects too: a bitcode
# file left by one major's LLVM breaks the next major's build.
EXTRA_CLEAN = src/test_hooks.o src/test_hooks.bc

EXTENSION = bpext
DATA = bpext--1.0.sql bpext--1.0--1.1.sql bpext--1.1--1.2.sql \
	bpext--1.2--1.3.sql bpext--1.3--1.4.sql bpext--1.4--1.5.sql
PGFILEDESC = "bpext - SSD buffer pool extension"

# The regression and isolation suites run in a temporary instance that
# preloads bpext with a small tier (test/regress.conf).
REGRESS = bpext_setup bpext_api
REGRESS_OPTS = --temp-instance=$(CURDIR)/tmp_check_regress \
	--temp-config=$(srcdir)/test/regress.conf

ISOLATION = tier_visibility
ISOLATION_OPTS = --inputdir=$(srcdir)/test --outputdir=$(CURDIR)/output_iso \
	--temp-instance=$(CURDIR)/tmp_check_iso \
	--temp-config=$(srcdir)/test/regress.conf

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare -Wno-clobbered

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS tracks no header dependencies: rebuild everything when a header
# changes, or objects built against different struct layouts get mixed.
$(OBJS): $(wildcard $(srcdir)/src/*.h)

# Debian's pg_buildext builds out of the tree (VPATH=<tree>, in
# build-<major>/): the objects go to a src/ of their own there.
ifdef VPATH
$(shell mkdir -p src)
endif

# After the include: Makefile.global resets PROVE_FLAGS.  BPEXT_PROVE_FLAGS
# adds to it (test/run-tests.sh: --timer).
PROVE_FLAGS = -I $(srcdir)/test/perl $(BPEXT_PROVE_FLAGS)

# pgbench comparisons on emulated slow storage (root; see test/bench/README.md).
.PHONY: bench bench-scan bench-instructions bench-scale bench-side-by-side
bench: all
	test/bench/run.sh $(BENCH_ARGS)

# Instructions per transaction under callgrind, without and with bpext.
bench-instructions: all
	test/bench/instructions.sh $(BENCH_ARGS)

# What each operation costs as the tier grows, up to a synthetic 1 TB map
# (test/bench/README.md; builds its own BPEXT_TEST_HOOKS=1 copy).
bench-scale:
	test/bench/scale.sh $(BENCH_ARGS)

# Data in RAM, with and without bpext, two servers at once (test/bench/README.md).
bench-side-by-side:
	test/bench/side_by_side.sh $(BENCH_ARGS)

# Scan scaling of the worker pool, serial against parallel (test/bench/README.md).
bench-scan: all
	test/bench/scan_scaling.sh $(BENCH_ARGS)

# Debian packages (debian/, pg_buildext): postgresql-<major>-bpext for each
# major in debian/pgversions that this system's PostgreSQL supports, into
# DEB_DIR (test/package.sh).
DEB_DIR ?= /tmp/bpext-packages
.PHONY: deb dist
deb:
	test/package.sh build $(DEB_DIR)

# The PGXN archive, bpext-<version>.zip, of the committed tree (HEAD).
dist:
	PG_CONFIG=$(PG_CONFIG) test/package.sh dist
