"""The `whatif` detector's findings and scores on the same run folders under several trees.

A change that should not move behaviour (a refactor, a move, a new reader) is shown to
keep it by analysing the same trained runs under the tree before and after it: for each
tree, copies of the run folders (their trace, meta and ground truth; no earlier what-if
or findings) are analysed in one child process with that tree first on `sys.path`
(`whatif --run`, `detect --detector whatif`, offline and online), then scored
(`score --detector whatif`). Each tree's findings are compared with the tree before it
in the list, file by file: identical, the same (ranks, window, cause) with other
numbers, or apart. List the commits in order, a change's parent before it.

    python benchmarks/findings_across_trees.py --runs results/test-seed2212/test-*/* \\
        --trees a85c3d1 HEAD --out results/across-trees [--json out.json]

A tree is a commit (checked out into a temporary git worktree) or WORKTREE (this
checkout as it is). The runs are trained once, by any tree (a split:
`snakemake score --configfile config/test.yaml SEED.yaml`, docs/detectors.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKTREE = "WORKTREE"

# Runs in the child, under the tree being measured: argv = out folder, then run folders.
_CHILD = r"""
import contextlib, io, shutil, sys
from pathlib import Path
from stragglerlab.cli import main
out, runs = Path(sys.argv[1]), [Path(r) for r in sys.argv[2:]]
done = []
for r in runs:
    d = out / r.parent.name / r.name
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(r, d, ignore=shutil.ignore_patterns("whatif", "detect", "plot"))
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        rc = [main(["whatif", "--run", str(d)]),
              main(["detect", "--run", str(d), "--detector", "whatif", "--out",
                    str(d / "detect")]),
              main(["detect", "--run", str(d), "--detector", "whatif", "--online", "--out",
                    str(d / "detect")])]
    (d / "analysis.log").write_text(log.getvalue())
    if any(rc):
        print(f"{d}: exit codes {rc} (see analysis.log)", file=sys.stderr)
    done.append(str(d))
with contextlib.redirect_stdout(io.StringIO()):
    main(["score", "--runs", *done, "--detector", "whatif", "--out", str(out / "score")])
"""


def _key(f: dict) -> tuple:
    ranks = tuple(sorted((r.get("rank"), r.get("dp_rank"), r.get("stage")) for r in f["ranks"]))
    return ranks, f["first_step"], f["last_step"], f["root_cause"]


def compare(a: Path, b: Path) -> dict:
    """Findings files of tree folder `b` against `a`: counts and the files apart."""
    files = sorted(p.relative_to(a) for p in a.glob("*/*/detect/whatif*.json"))
    identical, alike, apart = 0, 0, []
    for rel in files:
        fb = b / rel
        if not fb.exists():
            apart.append(f"{rel}: missing")
            continue
        ja = json.loads((a / rel).read_text())["findings"]
        jb = json.loads(fb.read_text())["findings"]
        if ja == jb:
            identical += 1
        elif sorted(map(_key, ja)) == sorted(map(_key, jb)):
            alike += 1
        else:
            apart.append(f"{rel}: {sorted(map(_key, ja))} -> {sorted(map(_key, jb))}")
    return {"files": len(files), "identical": identical, "same_findings": alike,
            "apart": apart}


def _score(folder: Path) -> dict:
    s = json.loads((folder / "score" / "scores.json").read_text())["whatif"]
    keys = ("f1", "root_cause_accuracy", "precision", "recall", "tp", "fp", "fn",
            "fault_recall", "fault_cause_accuracy", "detected_online")
    return {k: s.get(k) for k in keys}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", type=Path, required=True, help="trained run folders")
    ap.add_argument("--trees", nargs="+", required=True,
                    help=f"commits (or {WORKTREE}), each compared with the one before")
    ap.add_argument("--out", type=Path, required=True, help="one analysed copy per tree")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    runs = [r.resolve() for r in args.runs if (r / "run.json").is_file()]
    if not runs:
        print("no run folder (with run.json) among --runs", file=sys.stderr)
        return 2
    rows, trees = [], []
    try:
        for i, ref in enumerate(args.trees):
            root = REPO
            if ref != WORKTREE:
                root = Path(tempfile.mkdtemp(prefix="tree-")) / "t"
                subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q",
                                str(root), ref], check=True)
                trees.append(root)
            out = (args.out / f"{i}-{ref}").resolve()
            env = {**os.environ, "PYTHONPATH": str(root)}
            subprocess.run([sys.executable, "-c", _CHILD, str(out), *map(str, runs)],
                           check=True, env=env, cwd=root)
            rows.append({"tree": ref, "out": str(out), "score": _score(out)})
            if i:
                rows[-1]["against_previous"] = compare(Path(rows[-2]["out"]), out)
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "out"}), flush=True)
    finally:
        for t in trees:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(t)],
                           check=False)
    if args.json:
        args.json.write_text(json.dumps({"runs": len(runs), "trees": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
