"""What a run is asked to be: scenario configs with their bounds and vocabulary, the faults
(what a scenario requests and what a run records), the imbalance a scenario implies, the
pipeline stage partition, the synthetic token data and the cost models that size scenarios.

Imports only the floors below it (`trace`, `util`).
"""
