"""The method's shared algorithms over a trace: group-bys on arrays that give pandas' numbers
bit for bit, the pairing of a P2P send with its receive and the latency of each pair, and the
noise floor that detector thresholds are held to.

Imports only the floors below it (`scenarios`, `trace`, `util`).
"""
