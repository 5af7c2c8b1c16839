"""The one reader and the one set of rank, step and clock checks under both Kineto import
paths (stragglerlab.importers.kineto_events, stragglerlab.importers.rank_checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stragglerlab.importers.kineto_events import load_ranks, read_rank
from stragglerlab.importers.rank_checks import (
    align_clocks,
    check_ranks,
    common_steps,
    resolved_align,
)
from stragglerlab.util.errors import InputError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kineto-dp2-pp2"


def test_both_paths_read_a_file_alike():
    """The general and the vocabulary reading of one file agree on what both use: rank,
    world, host, clock base and steps; only the vocabulary reading holds the ranges."""
    for f in sorted(EXAMPLE.glob("rank*.json*")):
        general, vocab = read_rank(f), read_rank(f, vocabulary=True)
        for key in ("path", "rank", "world", "host", "pg_config", "base_us", "steps"):
            assert getattr(general, key) == getattr(vocab, key), key
        assert general.vocab is None and vocab.vocab.ranges
        assert not vocab.nccl and not vocab.kernels.size


def test_one_rank_is_a_job_only_where_no_peers_are_needed():
    one = load_ranks(sorted(EXAMPLE.glob("rank*.json*"))[:1], vocabulary=True)
    assert check_ranks(one, [], peers=False) == 4
    with pytest.raises(InputError, match="one rank's trace only"):
        check_ranks(one, [])


def test_missing_steps_are_a_note_or_an_error():
    evs = load_ranks(sorted(EXAMPLE.glob("rank*.json*")), vocabulary=True)
    last = max(evs[1].steps)
    evs[1].steps.pop(last)
    notes: list[str] = []
    kept = common_steps(evs, notes)
    assert last not in kept and f"rank {evs[1].rank} lacks [{last}]" in notes[0]
    with pytest.raises(InputError, match="--allow-partial"):
        common_steps(evs, [], allow_partial=False)


def test_align_clocks_modes():
    ends = {0: {"a": 10.0, "b": 20.0, "c": 30.0}, 1: {"a": 7.0, "b": 18.0, "c": 26.0},
            2: {"a": 12.0}}
    first = {0: 1.0, 1: 3.0, 2: 0.5}
    one = {0: 0.0, 1: 5.0, 2: -1.0}
    assert align_clocks("none", ends, first, one) == ("none", one)
    mode, off = align_clocks("collective", ends, first, one)
    assert mode == "collective" and off == {0: 0.0, 1: 3.0, 2: -2.0}  # medians of the gaps
    ends[2] = {"z": 1.0}  # shares nothing with rank 0: the first steps align instead
    assert align_clocks("collective", ends, first, one) == ("step",
                                                            {0: 0.0, 1: -2.0, 2: 0.5})


def test_auto_alignment_follows_the_hosts():
    assert resolved_align({"h"}, "auto") == "none"
    assert resolved_align({"h", "g"}, "auto") == "collective"
    assert resolved_align({"h", ""}, "auto") == "evidence"
    assert resolved_align({"h", "g"}, "step") == "step"
