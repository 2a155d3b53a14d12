"""pipegnn.microbatch.current: a unit learns its micro-batch from whoever runs it, never from the device."""
from __future__ import annotations

import threading

import pytest
import torch

from pipegnn.microbatch.current import computing, current, resolving


def test_computing_is_per_thread_and_nests() -> None:
    ids = torch.zeros(1)
    elsewhere: list[str] = []

    def other_thread() -> None:
        try:
            elsewhere.append(str(current(ids)))
        except RuntimeError as e:
            elsewhere.append(str(e))

    with computing(3):
        assert current(ids) == 3
        with computing(5):
            assert current(ids) == 5
        assert current(ids) == 3
        other = threading.Thread(target=other_thread)
        other.start()
        other.join()
    assert len(elsewhere) == 1 and "without being told its micro-batch" in elsewhere[0]
    with pytest.raises(RuntimeError, match="without being told its micro-batch"):
        current(ids)


def test_a_resolver_answers_threads_outside_computing() -> None:
    """A resolver (GPipe's) answers any thread not inside computing(); computing() wins where set."""
    step = torch.arange(4.0)
    answers: list[int] = []
    with resolving(lambda ids: 10 + ids.storage_offset()):
        worker = threading.Thread(target=lambda: answers.append(current(step.chunk(4)[2])))
        worker.start()
        worker.join()
        with computing(7):
            answers.append(current(step.chunk(4)[2]))
    assert answers == [12, 7]
    with pytest.raises(RuntimeError):
        current(step)
