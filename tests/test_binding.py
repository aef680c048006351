"""real/binding.py: which CPUs each rank gets (torch-free)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from real.binding import describe, rank_cpus, worth_binding


def test_this_machines_layouts():
    cpus = [0, 1]
    assert rank_cpus(0, 1, 2, cpus) == [0, 1]  # one rank, both threads
    assert [rank_cpus(r, 2, 1, cpus) for r in range(2)] == [[0], [1]]
    assert [rank_cpus(r, 4, 1, cpus) for r in range(4)] == [[0], [1], [0], [1]]
    assert describe(4, 1, cpus) == "0:0 1:1 2:0 3:1"


def test_uses_the_allowed_cpus_not_their_numbers():
    assert [rank_cpus(r, 2, 2, [4, 5, 8, 9]) for r in range(2)] == [[4, 5], [8, 9]]


@given(cpus=st.lists(st.integers(0, 255), min_size=1, max_size=32, unique=True).map(sorted),
       ranks=st.integers(1, 16), threads=st.integers(1, 8))
def test_every_rank_gets_its_threads_and_the_load_is_even(cpus, ranks, threads):
    sets = [rank_cpus(r, ranks, threads, cpus) for r in range(ranks)]
    width = min(threads, len(cpus))
    assert all(len(s) == width and set(s) <= set(cpus) for s in sets)
    load = Counter(c for s in sets for c in s)
    if ranks * width <= len(cpus):  # room for all: no CPU shared
        assert max(load.values()) == 1
    else:  # wrapped around: every CPU carries within one rank of every other
        assert max(load.values()) - min(load[c] for c in cpus) <= 1


@pytest.mark.parametrize("rank, world, cpus", [(2, 2, [0, 1]), (-1, 2, [0, 1]), (0, 1, [])])
def test_bad_input_is_refused(rank, world, cpus):
    with pytest.raises(ValueError):
        rank_cpus(rank, world, 1, cpus)


def test_binding_only_where_it_pays():
    assert worth_binding(1, 2, 2)  # one rank, two OpenMP threads
    assert worth_binding(4, 1, 2)  # ranks share CPUs
    assert not worth_binding(2, 1, 2)  # one single-threaded rank per CPU
