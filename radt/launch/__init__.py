"""Launching: one command as a recorded MLflow run.

The launcher, the recorded-run session, the child process and its
supervision, command parsing, environment capture and listener discovery.
May import :mod:`radt.record`, :mod:`radt.collocation` and top-level helpers.
"""
