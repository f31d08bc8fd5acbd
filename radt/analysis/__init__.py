"""Analysis: recorded runs into the figures of a study.

Loading samples, the figure arithmetic, the summary table and export.
Never imports :mod:`radt.launch`.
"""
