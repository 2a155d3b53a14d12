"""Stage timelines: when every pipeline stage ran each micro-batch, what that adds up to, and a trace.

- [`record`][pipegnn.timeline.boxes]: the recorder (``perf_counter`` on CPU, CUDA events on GPUs) and the
  hooks that time single-process stages (``single``, ``gpipe``);
- [`figures`][pipegnn.timeline.figures]: per-step figures (busy time per stage, makespan, bubble, imbalance,
  communication) and the schedules' theoretical bubbles;
- [`trace`][pipegnn.timeline.trace]: one step as a Chrome / Perfetto trace (``trace.json``).
"""
from pipegnn.timeline.boxes import Box, HookProbe, Timeline
from pipegnn.timeline.figures import PipelineInfo, medians, step_figures, theoretical_bubble
from pipegnn.timeline.trace import TRACE_NAME, chrome_trace, load_trace

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)
