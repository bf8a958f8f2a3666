"""What a ref shows (``lakefuse.graveler.views``): a branch's listing merges its staging over
its commit, and skips each subtree by seeking past it without reading the committed ranges it
lands in whole."""

from __future__ import annotations

import sys
from pathlib import Path

from lakefuse.cache import RamCache
from lakefuse.graveler.committed import CommittedManager
from lakefuse.graveler.memory import MemoryStagingStore
from lakefuse.graveler.model import StagingToken
from lakefuse.graveler.views import RefView

sys.path.insert(0, str(Path(__file__).parent / "committed"))
from committed_helpers import SMALL_RANGES, CountingMemoryBlock, make_record  # noqa: E402


def test_a_branch_lists_a_tree_of_directories_without_decoding_its_ranges():
    keys = sorted(b"d%02d/f%03d" % (d, i) for d in range(40) for i in range(60))
    block = CountingMemoryBlock()
    writer = CommittedManager(block, None, None, SMALL_RANGES)
    metarange = writer.write_metarange(make_record(k) for k in keys)
    writer.close()
    staging = MemoryStagingStore()
    token = StagingToken("t")
    staging.set(token, b"d05/new", make_record(b"d05/new"))
    staging.set(token, b"top", make_record(b"top"))
    for i in range(60):  # every file of d07 deleted: d07/ is no longer there
        staging.set(token, b"d07/f%03d" % i, None)
    ram = RamCache(1 << 30)
    committed = CommittedManager(block, None, ram, SMALL_RANGES)
    view = RefView(committed, metarange, staging, [token])
    listed = [key for key, _record in view.list(b"", b"/")]
    assert listed == [b"d%02d/" % d for d in range(40) if d != 7] + [b"top"]
    assert len(committed.ranges(metarange)) > 40
    # the metarange, and the ranges of d07, whose deleted files the listing had to pass
    assert ram.stats().entries <= 1 + 3
    assert [key for key, _record in view.list(b"d05/", b"/")][-1] == b"d05/new"
    committed.close()
