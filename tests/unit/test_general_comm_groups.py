"""A communication op's process group as the general import reads it
(stragglerlab.importers.general_comm): the ranks torch writes as a string or a list, the
peer of a two-rank group, and the string parsed once however many ops carry it."""

from __future__ import annotations

from stragglerlab.importers import general_comm as gc


def test_a_ranks_string_and_list_read_alike():
    for ranks in ("[3, 1, 2, 0]", [3, 1, 2, 0]):
        args = {"Process Group Name": "", "Process Group Ranks": ranks}
        assert gc._pg(args) == ("0,1,2,3", (0, 1, 2, 3))
    named = {"Process Group Name": "7", "Process Group Ranks": "[0, 1]"}
    assert gc._pg(named) == ("7", (0, 1))
    assert gc._pg({}) == ("", ())
    damaged = {"Process Group Name": "", "Process Group Ranks": "[" + "9" * 5000 + "]"}
    assert gc._pg(damaged) == ("", ())  # no rank is that long: no members, not an error


def test_a_two_rank_group_names_the_peer():
    for ranks in ("[4, 9]", [4, 9]):
        args = {"Process Group Ranks": ranks}
        assert gc._peer("recv", args, 9) == 4
        assert gc._peer("send", args, 4) == 9
        assert gc._peer("all_reduce", args, 4) == -1
    assert gc._peer("send", {"Dst Rank": 2, "Process Group Ranks": "[4, 9]"}, 4) == 2
    assert gc._peer("send", {"Process Group Ranks": "[0, 1, 2]"}, 1) == -1


def test_a_world_long_string_is_parsed_once():
    """Every op of a data-parallel all-reduce carries the world's ranks: parsing them per
    op made the import quadratic in the ranks."""
    text = "[" + ", ".join(str(r) for r in range(4096)) + "]"
    gc._ranks_in.cache_clear()
    gc._members_in.cache_clear()
    for _ in range(50):
        key, members = gc._pg({"Process Group Ranks": text})
        assert len(members) == 4096 and members[0] == 0
    assert gc._ranks_in.cache_info().misses == 1
    assert gc._members_in.cache_info().misses == 1
