"""Figures: one module per figure of the paper, a shared style, and the report.

Every figure module exposes a plotting function that takes already computed
numbers (from `analysis/`) and writes an image; `figures.style` holds the common
fonts, resolution, atomic saving and the 'data: <source>' stamp. Modules build
matplotlib `Figure` objects directly (no pyplot state), so they run headless.
"""
