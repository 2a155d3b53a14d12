"""A run, from its configuration to its record: [`launch`][pipegnn.training.launch] (``run``: checks, this
process or one worker per pipeline rank, signals, the record written), [`rank`][pipegnn.training.rank]
(one process's part: graph, plans, model, engine), [`epochs`][pipegnn.training.epochs] (the epoch loop and
the run's final figures), [`preemption`][pipegnn.training.preemption] (signals),
[`checkpoints`][pipegnn.training.checkpoints] (training state on disk),
[`resume_config`][pipegnn.training.resume_config] (the configuration a checkpoint must match),
[`resume`][pipegnn.training.resume] (the resume point every rank agrees on),
[`loggers`][pipegnn.training.loggers] (experiment trackers) and [`processes`][pipegnn.training.processes] (a
multi-process run's workers and process group). ``from pipegnn import run`` is the entry point."""
