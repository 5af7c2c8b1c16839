"""Importers: turn traces written by other tools into the stragglerlab trace schema.

Below the CLI, beside analysis; they import neither torch nor Ray.

    from stragglerlab.importers.kineto import import_kineto
    result = import_kineto(["rank0.json.gz", "rank1.json.gz"])   # -> result.df, result.meta
"""
