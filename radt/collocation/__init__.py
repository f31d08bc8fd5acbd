"""Collocation backends: several runs on one GPU naively, under MPS, or in MIG slices.

Each mode has one backend (:func:`backend_for`), each with the same verbs:
``check`` (reads the GPU, changes nothing) and ``set_up`` (one slot per run).
The workload runner calls :func:`check` before anything starts, then
:func:`setup` with a :class:`Teardown`, starts
the runs with each :class:`Slot`'s environment, calls :func:`after_start`,
and always runs the teardown: every change setup made (a power limit, a MIG
GPU/compute instance, an MPS control daemon) has its undo step registered
right after it was made, and the steps run in reverse order even when some
fail. See ``mig.py``, ``mps.py`` and ``power.py`` for how each one decides.
"""

from radt.collocation.backend import Backend, backend_for, check, setup
from radt.collocation.common import Slot, SlotRequest
from radt.collocation.mps import after_start, server_list
from radt.collocation.teardown import Teardown
from radt.tags import MODES

__all__ = [
    "MODES",
    "Backend",
    "Slot",
    "SlotRequest",
    "Teardown",
    "after_start",
    "backend_for",
    "check",
    "server_list",
    "setup",
]
