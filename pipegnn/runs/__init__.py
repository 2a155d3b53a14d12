"""The run side of a run's and a sweep's folders: what a run writes and claims there, apart from reading
results back ([`pipegnn.results`][pipegnn.results]).

- [`record_writes`][pipegnn.runs.record_writes]: a run's ``result.json`` written atomically, and the check
  that it can be, before training;
- [`ownership`][pipegnn.runs.ownership]: a sweep's folder belongs to one sweep, a job's to one job (the
  ``SweepOwner`` Hydra callback); [`run_claims`][pipegnn.runs.run_claims]: a run's folder to one run;
  [`claims`][pipegnn.runs.claims]: what those claims are made of;
- [`hydra_writes`][pipegnn.runs.hydra_writes]: the checks of what Hydra writes where, before it does;
- [`resume_check`][pipegnn.runs.resume_check]: whether ``resume=true`` keeps a job's record;
- [`callbacks`][pipegnn.runs.callbacks]: the end-of-sweep failure summary and the progress bar.
"""
