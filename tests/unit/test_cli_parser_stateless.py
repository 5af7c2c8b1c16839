"""One parser from `build_parser()` parses any number of argvs, each as a fresh parser
would: a program or a test that builds it once must not see one parse change the next.
The refusal of a flag given twice still holds within one argv."""

from __future__ import annotations

import pytest

from stragglerlab.cli import VERBS, build_parser

ARGVS: list[list[str]] = [
    ["import", "kineto", "--traces", "/a", "--out", "/y"],
    ["import", "kineto", "--traces", "/b/rank*.json.gz", "--out", "/y"],
    ["import", "kineto", "--traces", "/c", "--out", "/z", "--layout", "dp=2,pp=2"],
    ["detect", "--run", "/r1"],
    ["detect", "--run", "/r2", "--detector", "whatif", "--out", "/o"],
    ["detect", "--run", "/r3", "--set", "a=1", "--set", "b=2"],
    ["score", "--runs", "/r1", "/r2", "--out", "/s"],
    ["score", "--runs", "/r3", "--out", "/s", "--offline-only"],
    ["whatif", "--run", "/r1"],
    ["whatif", "--run", "/r2", "--out", "/w", "--timelines"],
    ["whatif", "--trace", "/t.parquet", "--meta", "/m.yaml", "--out", "/w"],
    ["plot", "--run", "/r1"],
    ["plot", "--trace", "/t.parquet", "--meta", "/m.yaml", "--out", "/p"],
    ["figures", "--runs", "/r1", "/r2", "--out", "/f"],
    ["figures", "--runs", "/r3", "--out", "/f", "--only", "fig03"],
    ["report", "--figures", "/f", "--out", "/rep"],
    ["report", "--figures", "/g", "--scores", "/s.json", "--out", "/rep"],
    ["synth", "--out", "/syn", "--steps", "4"],
    ["synth", "--out", "/syn2", "--slow", "0,0,1.5", "--slow", "1,1,2.0"],
    ["list", "scenarios"],
    ["list", "detectors"],
    ["clean"],
    ["noise-floor", "--runs", "/r1", "/r2", "--out", "/nf"],
    ["noise-floor", "--runs", "/r3", "--out", "/nf"],
    ["monitor", "--run", "/r1", "--once", "--no-serve"],
    ["monitor", "--run", "/r2", "--port", "0"],
    ["train", "--scenario", "clean-dp2-pp2", "--out", "/t1", "--steps", "4"],
    ["train", "--scenario", "slow-worker-1", "--out", "/t2", "--launcher", "local"],
]
"""Argvs of every verb, several per verb, repeating the flags that once kept state."""


def test_the_argvs_cover_every_verb():
    assert {argv[0] for argv in ARGVS} == set(VERBS)


def test_one_parser_parses_many_argvs_like_a_fresh_one():
    shared = build_parser()
    fresh = [vars(build_parser().parse_args(argv)) for argv in ARGVS]
    for _ in range(3):  # again and again: a freed namespace's memory is reused
        assert [vars(shared.parse_args(argv)) for argv in ARGVS] == fresh


@pytest.mark.parametrize("argv, flag", [
    (["import", "kineto", "--traces", "/a", "--traces", "/b", "--out", "/y"], "--traces"),
    (["detect", "--run", "/a", "--run", "/b"], "--run"),
    (["score", "--runs", "/a", "--runs", "/b", "--out", "/y"], "--runs"),
    (["whatif", "--run", "/a", "--out", "/x", "--out", "/y"], "--out"),
    (["monitor", "--run", "/a", "--port", "1", "--port", "2"], "--port"),
])
def test_a_flag_given_twice_in_one_argv_is_still_refused(argv, flag, capsys):
    shared = build_parser()
    for good in ARGVS:
        shared.parse_args(good)
    with pytest.raises(SystemExit) as e:
        shared.parse_args(argv)
    assert e.value.code == 2
    assert f"error: {flag} is given twice" in capsys.readouterr().err
    shared.parse_args(ARGVS[0])  # and a refused parse leaves nothing behind either
