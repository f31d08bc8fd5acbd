"""Recording: samples to disk and to MLflow.

The recorder, the spool (the full-rate truth), the batched MLflow writer,
decimation, the samplers of polled listeners, readers of streamed tools, the
run folder, the finishing steps and ``radt sync``. Never imports
:mod:`radt.launch`.
"""
