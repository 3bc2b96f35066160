"""Python's cyclic garbage collector held off through a block that makes many small objects
and no cycles (a store's chunks read for a listing, a tree's files checked for a sync): its
passes, set off by the number of objects, would go over every one of them again and again."""

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection through the block (reference counting frees as ever); a
    collector already off stays off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
