"""The time left an ingest shows: from what the run measured, told only once it means
something, and near the real end after a tenth of the work (a scripted clock, no ingest)."""

import math
import random

from archivist.terminal.progress import Estimate
from archivist.tools.progress import Discovered, Embedded, Loaded


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def mixed_sizes(files: int, seed: int = 5) -> list[int]:
    """Sizes as a folder of documents has them: mostly notes of a few kB, some long guides,
    a few very large files, in no particular order."""
    rng = random.Random(seed)
    return [int(math.exp(rng.uniform(math.log(200), math.log(300_000)))) for _ in range(files)]


CHUNK = 1000  # characters a chunk holds
BATCH = 16  # files read a step
PER_REQUEST, PER_CHUNK, PER_KCHAR = 0.010, 0.0002, 0.002  # an embedder's costs (seconds)
MODEL_LOAD = 4.0  # before its first answer


def chunks_of(size: int) -> list[int]:
    return [min(CHUNK, size - at) for at in range(0, size, CHUNK)]


def run(sizes: list[int], clock: Clock, estimate: Estimate, watch) -> float:
    """Script an ingest: the files found, read a batch ahead of the embedder, their chunks
    embedded at a cost that grows with their characters; `watch(done, left_so_far)` after each
    file. Return when it ends."""
    estimate.add(Discovered(len(sizes), sum(sizes)))
    batches = [sizes[n : n + BATCH] for n in range(0, len(sizes), BATCH)]
    first = True
    for n, batch in enumerate(batches):
        if n == 0:
            estimate.add(Loaded(len(batch), 0, sum(len(chunks_of(s)) for s in batch), sum(batch)))
        if n + 1 < len(batches):  # the next batch is read while this one is embedded
            ahead = batches[n + 1]
            estimate.add(Loaded(len(ahead), 0, sum(len(chunks_of(s)) for s in ahead), sum(ahead)))
        for size in batch:
            pieces = chunks_of(size)
            clock.now += MODEL_LOAD if first else 0.0
            first = False
            clock.now += PER_REQUEST + len(pieces) * PER_CHUNK + size / 1000 * PER_KCHAR
            estimate.add(Embedded("f", len(pieces)))
            watch(clock.now)
    return clock.now


def test_the_time_left_at_a_tenth_of_the_work_is_within_a_quarter_of_the_real_end():
    sizes = mixed_sizes(600)
    # A first run to learn when the work is done; the estimate is seen on a second, the same.
    end = run(sizes, Clock(), Estimate(Clock()), lambda now: None)
    work = end - MODEL_LOAD  # the embedding itself

    clock = Clock()
    estimate = Estimate(clock)
    seen: dict[str, float] = {}

    def watch(now: float) -> None:
        if "tenth" not in seen and now - MODEL_LOAD >= work / 10:
            seen["tenth"] = now
            seen["left"] = estimate.seconds_left()

    assert run(sizes, clock, estimate, watch) == end
    true_left = end - seen["tenth"]
    assert seen["left"] is not None
    assert abs(seen["left"] - true_left) <= 0.25 * true_left, (seen, true_left)


def test_nothing_is_told_before_it_means_something():
    clock = Clock()
    estimate = Estimate(clock)
    assert (estimate.seconds_left(), estimate.chunk_rate(), estimate.file_rate()) == (None,) * 3
    estimate.add(Discovered(100, 100 * 5000))
    estimate.add(Loaded(10, 0, 50, 10 * 5000))
    clock.now = 30.0  # the model loading: nothing embedded yet
    assert estimate.seconds_left() is None and estimate.chunk_rate() is None
    estimate.add(Embedded("a", 5))
    clock.now = 31.0  # embedding for a second only: a rate of one request is noise
    estimate.add(Embedded("b", 5))
    assert estimate.seconds_left() is None and estimate.file_rate() is None
    clock.now = 30.0 + Estimate.SETTLE_SECONDS
    estimate.add(Embedded("c", 5))
    # Over the later half of the 3 s since the first chunks: 5 chunks from 31 s to 33 s.
    assert estimate.chunk_rate() == 5 / 2
    assert estimate.seconds_left() == (500 - 15) / (5 / 2)  # 500 chunks expected in all
    assert estimate.file_rate() == 10 / clock.now


def test_a_burst_of_chunks_embedded_ahead_is_left_out_of_the_rate():
    clock = Clock()
    estimate = Estimate(clock)
    estimate.add(Discovered(100, 100 * 5000))
    estimate.add(Loaded(100, 0, 10_000, 100 * 5000))
    for second in range(1, 31):  # 2,000 chunks at once, then 100 a second
        clock.now = float(second)
        estimate.add(Embedded("f", 2000 if second == 1 else 100))
    assert estimate.chunk_rate() == 100.0
    assert estimate.seconds_left() == (10_000 - 4900) / 100


def test_a_run_of_unchanged_files_expects_no_chunks_from_them():
    clock = Clock()
    estimate = Estimate(clock)
    estimate.add(Discovered(4, 4000))
    estimate.add(Loaded(2, 2, 0, 2000))  # passed over, unchanged
    estimate.add(Loaded(2, 0, 6, 2000))
    assert estimate.expected_chunks() == 6


def test_without_sizes_the_files_tell_how_far_the_run_is():
    estimate = Estimate(Clock())
    estimate.add(Discovered(10))  # the pages of a site: no sizes
    estimate.add(Loaded(2, 0, 8))
    assert estimate.expected_chunks() == 40
