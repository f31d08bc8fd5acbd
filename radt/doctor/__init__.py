"""``radt doctor``'s machinery (the command itself: :mod:`radt.cli.doctor`).

:mod:`radt.doctor.probes` finds out what this machine lets radT measure and control;
:mod:`radt.doctor.measure` records :mod:`radt.doctor.load` (the built-in load, run as
``python -m radt.doctor.load``) as a run and compares the GPU's readings (``--measure``).
"""
