"""Fuzz: a noise-floor file naming no family, or a list where a mapping
belongs, is refused (a floor with no family is no floor), and `--noise-floor ""` says the
path is empty."""

from __future__ import annotations

import pytest
import yaml

from stragglerlab.cli import main
from stragglerlab.method.noise_floor import (
    DEFAULT_NOISE_FLOOR,
    NOISE_FLOOR_SCHEMA,
    noise_floor_option,
    read_noise_floor,
)
from stragglerlab.util.errors import InputError

FAMILY = {"n_runs": 3, "layouts": ["dp2-pp2"], "statistics": {"link_step_share": 0.04}}


def _write(tmp_path, doc: dict):
    path = tmp_path / "noise-floor.yaml"
    path.write_text(yaml.safe_dump({"schema": NOISE_FLOOR_SCHEMA, **doc}))
    return path


@pytest.mark.parametrize(("families", "message"), [
    ([], "families: expected an object, got []"),
    ({}, "families: names no layout family"),
    (None, "families: missing: a floor names at least one layout family"),
    ("", "families: expected an object"),
])
def test_a_floor_without_a_family_is_refused(tmp_path, families, message):
    with pytest.raises(InputError, match="rewrite it with") as e:
        read_noise_floor(_write(tmp_path, {"families": families}))
    assert message in str(e.value)


def test_a_floor_with_no_families_key_is_refused(tmp_path):
    with pytest.raises(InputError, match="families: missing"):
        read_noise_floor(_write(tmp_path, {}))


@pytest.mark.parametrize(("field", "value", "message"), [
    ("statistics", [], "families.dp+pp.statistics: expected an object, got []"),
    ("online", [], "families.dp+pp.online: expected an object, got []"),
    ("layouts", {}, "families.dp+pp.layouts: expected a list, got {}"),
])
def test_a_list_for_a_mapping_in_a_family_is_refused(tmp_path, field, value, message):
    path = _write(tmp_path, {"families": {"dp+pp": {**FAMILY, field: value}}})
    with pytest.raises(InputError) as e:
        read_noise_floor(path)
    assert message in str(e.value)


def test_left_out_or_null_fields_still_mean_none(tmp_path):
    fam = {"n_runs": 3, "statistics": None, "online": None, "layouts": None}
    floor = read_noise_floor(_write(tmp_path, {"families": {"dp+pp": fam}}))
    (ff,) = floor.families.values()
    assert ff.statistics == {} and ff.online == {} and ff.layouts == ()


def test_the_shipped_floor_still_reads():
    assert read_noise_floor(DEFAULT_NOISE_FLOOR).families


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_noise_floor_path_is_named(value):
    with pytest.raises(InputError, match="--noise-floor is empty: pass a noise-floor.yaml"):
        noise_floor_option(value)


def test_detect_with_an_empty_floor_file_or_path_is_one_error_line(tmp_path, capsys):
    run = tmp_path / "r"
    assert main(["synth", "--out", str(run), "--dp", "2", "--pp", "2", "--steps", "6",
                 "--quiet"]) == 0
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    capsys.readouterr()
    path = _write(tmp_path, {"families": []})
    for value, message in ((str(path), "families: expected an object, got []"),
                           ("", "--noise-floor is empty")):
        assert main(["detect", "--run", str(run), "--noise-floor", value, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err
