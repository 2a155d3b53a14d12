"""The processes of a multi-process run (``engine=pipelining``), which are run plumbing, not an engine:
:mod:`~pipegnn.processes.spawn` starts a run's workers on this machine (``engine.launcher=spawn``),
:mod:`~pipegnn.processes.outcome` says what the run records of their exits, and
:mod:`~pipegnn.processes.group` joins the process group of torchrun's environment."""
