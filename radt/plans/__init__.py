"""Plans and studies: what runs together, and running it.

Plan CSV scanning, the plan model, validation and write-back, and the
workload runner. May import :mod:`radt.launch` and :mod:`radt.collocation`.
"""
