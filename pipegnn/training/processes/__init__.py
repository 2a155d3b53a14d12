"""The processes of a multi-process run (``engine=pipelining``), which are run plumbing, not an engine:
[`spawn`][pipegnn.training.processes.spawn] starts a run's workers on this machine
(``engine.launcher=spawn``), [`outcome`][pipegnn.training.processes.outcome] says what the run records of
their exits, and [`group`][pipegnn.training.processes.group] joins the process group of torchrun's
environment."""
