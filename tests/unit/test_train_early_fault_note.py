"""`train` notes a fault placed too soon after the warm-up for the ground truth to measure
its slowdown within the run (the launcher is replaced: no Ray, no torch run)."""

from __future__ import annotations

import pytest

from stragglerlab.cli import main

CONFIG = """
scenarios:
  early-fault:
    parallel: {{dp: 2, pp: 1}}
    run: {{steps: 12, warmup_steps: 3}}
    faults:
      - {{kind: slow-worker, targets: [{{dp_rank: 1, stage: 0}}], first_step: {first},
          params: {{factor: 2.0}}}}
"""


@pytest.fixture
def fake_launch(monkeypatch):
    import stragglerlab.host.residue as residue
    import stragglerlab.workloads.launcher as launcher

    def launch(*_a, **_k):
        return {"outcome": "ok", "trace": {"complete_steps": list(range(3, 12))},
                "wall_s": {"total": 1.0}, "backend": "gloo", "error": None}

    monkeypatch.setattr(launcher, "launch", launch)
    monkeypatch.setattr(residue, "clean_residue", lambda *a, **k: {})


@pytest.mark.parametrize("first, noted", [(5, True), (6, False)])
def test_a_fault_too_early_to_measure_is_noted(tmp_path, capsys, fake_launch, first, noted):
    cfg = tmp_path / "cases.yaml"
    cfg.write_text(CONFIG.format(first=first))
    assert main(["train", "--config", str(cfg), "--scenario", "early-fault",
                 "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert ("note: the first fault starts at step 5, 2 traced step(s)" in err) is noted, err
