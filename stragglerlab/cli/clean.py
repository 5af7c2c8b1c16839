"""`stragglerlab clean`: reap what a killed training run left on this host.

    stragglerlab clean

A driver killed with SIGKILL cannot stop its Ray instance or undo its
isolation. This removes, for runs whose driver is dead only: processes
marked as a run's (Ray's GCS, raylet, agents, workers and rank actors carry
STRAGGLERLAB_DRIVER), the run's cgroups, and its network namespaces with
their veths and tc rules. Runs still going are never touched. `train` does
the same at its start. Prints what was removed to stdout (with --quiet too);
exit 0.
"""

from __future__ import annotations

import argparse


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    from stragglerlab.cli.common import examples

    return sub.add_parser(name, help="remove what killed runs left (processes, cgroups, "
                                     "namespaces, tc rules)",
                          epilog=examples("stragglerlab clean"))


def run(args) -> int:
    """Reap and report."""
    from stragglerlab.host.residue import clean_residue

    report = clean_residue()
    # The result: stdout, --quiet or not.
    print(f"clean: killed {len(report['processes'])} orphaned processes, removed "
          f"{len(report['cgroups'])} cgroup runs and {len(report['netns'])} network "
          "topologies")
    if report["netns_skipped"]:
        print(f"clean: network namespaces not checked: {report['netns_skipped']}")
    return 0
