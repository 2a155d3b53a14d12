"""pipegnn.timeline.trace: a step's boxes as a Chrome trace (its rows, boxes and epoch)."""
from __future__ import annotations

import json

from pipegnn.timeline import Box, chrome_trace

from tests.helpers import pipeline_info


def test_chrome_trace_rows_and_boxes() -> None:
    boxes = [Box(0, 0, 0, "forward", 1.0, 1.5), Box(1, 1, 0, "recv_forward", 1.0, 1.5),
             Box(1, 1, 0, "forward", 1.5, 1.75), Box(0, 0, 0, "recompute", 2.0, 2.25)]
    trace = chrome_trace(boxes, pipeline_info(), epoch=3)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and "name" in e["args"]}
    assert {"rank 0", "rank 1", "stage 0 (a) on cpu", "stage 1 (b) on cpu"} <= names
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["pid"], e["tid"], e["ts"], e["dur"]) for e in events] == [
        ("F0", 0, 0, 0.0, 500000.0), ("recv F0", 1, 1, 0.0, 500000.0), ("F0", 1, 1, 500000.0, 250000.0),
        ("R0", 0, 0, 1000000.0, 250000.0)]
    assert trace["otherData"]["epoch"] == 3
    json.dumps(trace)
