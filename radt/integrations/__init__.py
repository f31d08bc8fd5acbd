"""Callbacks that report a framework's training to radT: :mod:`radt.integrations.transformers`
(the Hugging Face ``Trainer``) and :mod:`radt.integrations.lightning` (Lightning's ``Trainer``).

Each module imports its framework; import the one you use (``radt --autolog`` adds it to every
``Trainer`` made without an edit to the script).
"""
