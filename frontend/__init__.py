"""radT's web UI (``radt ui``): a Dash app that reads through ``radt.load`` and ``radt.summary``.

``create_app`` (in :mod:`radt.frontend.app`) builds the app; :mod:`radt.frontend.serve`
is the command line; the figure builders in :mod:`radt.frontend.charts` and
:mod:`radt.frontend.series` are pure functions of DataFrames.
"""
