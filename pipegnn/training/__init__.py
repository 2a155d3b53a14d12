"""A run, from its configuration to its record: :mod:`~pipegnn.training.launch` (``run``: checks, this
process or one worker per pipeline rank, signals, the record written), :mod:`~pipegnn.training.rank`
(one process's part: graph, plans, model, engine), :mod:`~pipegnn.training.epochs` (the epoch loop and
the run's final figures), :mod:`~pipegnn.training.preemption` (signals and checkpoints),
:mod:`~pipegnn.training.loggers` (experiment trackers) and :mod:`~pipegnn.training.processes` (a
multi-process run's workers and process group). ``from pipegnn import run`` is the entry point."""
