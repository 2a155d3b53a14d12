"""The processes of a multi-process run (``engine=pipelining``), which are run plumbing, not an engine:
:mod:`~pipegnn.processes.spawn` starts a run's workers on this machine (``engine.launcher=spawn``) and
:mod:`~pipegnn.processes.group` joins the process group of torchrun's environment."""
