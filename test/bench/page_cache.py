#!/usr/bin/env python3
"""What the kernel's page cache holds of the data files and of the tier file.

    page_cache.py DATA_FILE... [--tier TIER_FILE SLOT_MAP]

Prints one JSON object: the data files' pages resident in the page cache
and, with --tier, the tier file's resident slots and how many pages are
resident twice, once as a data-file page and once as the tier copy of the
same block (double caching).  SLOT_MAP is a file of "slot<TAB>path<TAB>
block" lines (path relative to the current directory, the data directory)
for the tier slots that hold a page of the data files given.

Residency comes from mincore(2) on a read-only shared mapping of each
file: mapping a file and asking does not read it or fault pages in, so
the measurement leaves the cache as it found it.
"""
import ctypes
import ctypes.util
import json
import mmap
import os
import sys

BLCKSZ = 8192
RELSEG_BLOCKS = 131072          # 1 GB segments of 8 kB blocks

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
MAP_FAILED = ctypes.c_void_p(-1).value
PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_blocks(path):
    """Set of BLCKSZ block numbers of which every OS page is in the cache."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return set()
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return set()
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            npages = (size + PAGE - 1) // PAGE
            vec = ctypes.create_string_buffer(npages)
            if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            per_block = BLCKSZ // PAGE
            raw = vec.raw
            return {b for b in range(size // BLCKSZ)
                    if all(raw[b * per_block + i] & 1 for i in range(per_block))}
        finally:
            libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)


def segment_files(path):
    """A relation's main fork: path, path.1, path.2, ..."""
    yield 0, path
    n = 1
    while os.path.exists(f"{path}.{n}"):
        yield n, f"{path}.{n}"
        n += 1


def main():
    args = sys.argv[1:]
    tier = slot_map = None
    if "--tier" in args:
        i = args.index("--tier")
        tier, slot_map = args[i + 1], args[i + 2]
        args = args[:i] + args[i + 3:]
    data = {}                   # (relation path, block) -> resident
    for rel in args:
        for seg, f in segment_files(rel):
            for b in resident_blocks(f):
                data[(rel, seg * RELSEG_BLOCKS + b)] = True
    out = {"data_resident_pages": len(data)}
    if tier:
        # Slot i is at offset BLCKSZ * (i + 1): the first block is the header.
        tier_resident = {b - 1 for b in resident_blocks(tier) if b > 0}
        mapped = both = 0
        with open(slot_map) as f:
            for line in f:
                slot, rel, block = line.rstrip("\n").split("\t")
                mapped += 1
                if int(slot) in tier_resident and (rel, int(block)) in data:
                    both += 1
        out.update({"tier_resident_pages": len(tier_resident),
                    "tier_pages_of_these_relations": mapped,
                    "double_cached_pages": both})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
