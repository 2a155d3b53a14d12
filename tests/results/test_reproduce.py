"""A record's overrides composed at this commit against the config it holds: equal for a record written
now, every key that changes the computation named when a default moved, the places a run was kept
never."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pipegnn.config import schema
from pipegnn.config.schema import compose_config
from pipegnn.config.typed import config_container
from pipegnn.results.__main__ import main
from pipegnn.results.reproduce import command_jobs, composed_now, drift, recompose
from pipegnn.run_record import RunRecord, Status
from pipegnn.runs.record_writes import write_record

from tests.helpers import ROOT, TINY_SYNTHETIC

REFERENCE = ROOT / "results" / "reference"

_OVERRIDES = [*TINY_SYNTHETIC, "train.epochs=3", "chunks=2", "microbatch.halo=historical"]


def _record(overrides: list[str] | None = _OVERRIDES, **edits: str) -> RunRecord:
    """A record of ``overrides`` as a run at this commit writes it; ``edits`` (``"a.b": value``) change its
    config as an older default would have."""
    config = config_container(compose_config(_OVERRIDES))
    for dotted, value in edits.items():
        *parents, key = dotted.split(".")
        section = config
        for name in parents:
            section = section[name]
        section[key] = value
    return RunRecord(status=Status.FAILED, config=config, choices={}, env={}, overrides=overrides)


def test_a_record_written_now_recomposes_to_its_config() -> None:
    assert drift(_record()).differs == {}


def test_a_moved_default_is_named_and_where_a_run_was_kept_is_not() -> None:
    """The issue's example (historical rows with targets=train, before the default became all) is named
    with both values; another data cache and another checkpoint cadence are not differences."""
    old = _record(**{"microbatch.targets": "train", "data.cache": "/elsewhere", "train.checkpoint_every": 5})
    assert drift(old).differs == {"microbatch.targets": ("train", "all")}
    budget = _record(**{"train.epochs": 200, "train.monitor": "val_loss"})  # another budget: another figure
    assert set(drift(budget).differs) == {"train.epochs", "train.monitor"}


def test_an_override_that_no_longer_composes_is_named() -> None:
    gone = drift(_record(overrides=[*_OVERRIDES, "model.no_such_key=1"]))
    assert gone.error is not None and "model.no_such_key" in gone.error


def test_the_command_line_checks_every_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_record(tmp_path / "0", _record())
    assert main(["--recompose", str(tmp_path)]) == 0
    assert "1 records: 1 recompose to their config at this commit, 0 do not" in capsys.readouterr().out
    write_record(tmp_path / "1", _record(**{"microbatch.targets": "train"}))
    write_record(tmp_path / "2", _record(overrides=None))
    assert main(["--recompose", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert f"drifted: {tmp_path / '1' / 'result.json'}: microbatch.targets='train' in it, 'all' now" in err
    assert "3 records: 1 recompose" in out and "1 kept no overrides" in out
    assert [d.path.parent.name for d in recompose(tmp_path)] == ["0", "1", "2"]


def test_a_records_overrides_never_import_nor_resolve_anything(tmp_path: Path, monkeypatch) -> None:
    """Probing found that composing a record's overrides imported a module (hydra.searchpath=[pkg://m])
    and resolved ${oc.env:HOME} into the error line. Hydra's own overrides are never composed (where a job
    ran, not what it computed), and an override holding an interpolation is named, not composed."""
    (tmp_path / "evil_searchpath_module.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    searched = drift(_record(overrides=[*_OVERRIDES, "hydra.searchpath=[pkg://evil_searchpath_module]"]))
    assert searched.error is None and searched.differs == {} and not (tmp_path / "ran").exists()
    env = drift(_record(overrides=[*_OVERRIDES, "chunks=${oc.env:HOME}"]))
    assert env.error is not None and "holds an interpolation" in env.error
    assert str(Path.home()) not in env.error
    long = drift(_record(overrides=[*_OVERRIDES, "logger=[" + "1," * 10_000 + "1]"]))
    assert long.error is not None and "characters (at most 4,096)" in long.error


@pytest.mark.parametrize("packed", [False, True])
def test_more_records_than_the_bound_are_counted_not_composed(tmp_path: Path, packed: bool,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """--recompose composed every record it found (about 20 ms each: an archive of 65,536 tiny records took
    20 minutes; 10,000 links to one 3 MB record, read whole before they were counted, took 5 GB): more than
    MAX_RECOMPOSED records, in a folder or in an archive (a second case), is one line naming the count
    before any record is read."""
    from pipegnn.results import reproduce
    from pipegnn.results.archive import pack, run_files

    monkeypatch.setattr(reproduce, "MAX_RECOMPOSED", 2)
    monkeypatch.setattr(reproduce, "MAX_RECOMPOSED_BYTES", 1 << 30)
    for name in "abc":
        write_record(tmp_path / "runs" / name, _record())
    if packed:
        pack(tmp_path / "records.jsonl.gz", run_files(tmp_path / "runs"))
        (tmp_path / "packed").mkdir()
        (tmp_path / "records.jsonl.gz").rename(tmp_path / "packed" / "records.jsonl.gz")
    monkeypatch.setattr(reproduce, "drift", lambda *a, **k: pytest.fail("a record was composed"))
    for reader in ("load_record", "record_of"):  # counted before any is read (10,000 links to a 3 MB
        monkeypatch.setattr(reproduce, reader, lambda *a, **k: pytest.fail("a record was read"))  # record)
    assert main(["--recompose", str(tmp_path / ("packed" if packed else "runs"))]) == 2
    assert "holds 3 records, more than the 2 one --recompose composes" in capsys.readouterr().err


def test_more_bytes_of_records_than_the_bound_are_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """--recompose bounded the count only: 100 links to a 7.8 MB record took 29 s (10,000 would have taken
    49 minutes). More bytes of record files than MAX_RECOMPOSED_BYTES is one line before any is read; and
    (a second case) hard links to one record are that record, read once (200 links took 10 s: one read a
    link)."""
    from pipegnn.results import reproduce

    write_record(tmp_path / "runs" / "a", _record())
    size = (tmp_path / "runs" / "a" / "result.json").stat().st_size
    for name in "bc":
        (tmp_path / "runs" / name).mkdir()
        shutil.copy(tmp_path / "runs" / "a" / "result.json", tmp_path / "runs" / name / "result.json")
        (tmp_path / "links" / name).mkdir(parents=True)
        os.link(tmp_path / "runs" / "a" / "result.json", tmp_path / "links" / name / "result.json")
    monkeypatch.setattr(reproduce, "MAX_RECOMPOSED_BYTES", 3 * size - 1)
    real = reproduce.load_record
    for reader in ("load_record", "record_of", "drift"):
        monkeypatch.setattr(reproduce, reader, lambda *a, **k: pytest.fail("a record was read"))
    assert main(["--recompose", str(tmp_path / "runs")]) == 2
    assert f"holds {3 * size:,} bytes of records" in capsys.readouterr().err
    (tmp_path / "links" / "a").mkdir()
    os.link(tmp_path / "runs" / "a" / "result.json", tmp_path / "links" / "a" / "result.json")
    read: list[Path] = []
    monkeypatch.setattr(reproduce, "load_record", lambda path: (read.append(path), real(path))[1])
    monkeypatch.setattr(reproduce, "drift", lambda record, path, compositions: None)
    assert reproduce._extent(tmp_path / "links") == (1, size)
    assert len(reproduce.recompose(tmp_path / "links")) == 1
    assert read == [tmp_path / "links" / "a" / "result.json"]  # the first name, read once


@pytest.mark.parametrize("kind", ["added keys", "group combinations"])
def test_whole_compositions_are_bounded_per_recompose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      kind: str) -> None:
    """1,000 records each adding its own key (``+extra<i>=1``, a 5.8 KB archive) took 117 s to recompose:
    each was composed whole by Hydra (about 0.1 s). One --recompose makes at most MAX_COMPOSITIONS whole
    compositions; the records past it are named, not composed. A second case: records of distinct
    combinations of config groups."""
    from pipegnn.results import reproduce

    monkeypatch.setattr(reproduce, "MAX_COMPOSITIONS", 2)
    extra = ([f"+extra{i}=1"] for i in range(4)) if kind == "added keys" else \
        ([f"model={m}"] for m in ("gat", "gcn", "sage", "gcn2"))
    for i, more in enumerate(extra):
        write_record(tmp_path / "runs" / str(i), _record(overrides=[*_OVERRIDES, *more]))
    composed: list[list[str]] = []
    real = schema.compose_config
    monkeypatch.setattr(schema, "compose_config", lambda o: (composed.append(o), real(o))[1])
    reproduce._composed.cache_clear()
    drifts = recompose(tmp_path / "runs")
    assert [d.error is None for d in drifts] == [True, True, False, False]
    assert all("more than 2 whole compositions" in str(d.error) for d in drifts[2:])
    assert len(composed) == 2


def test_overrides_past_their_total_bound_are_named_not_composed() -> None:
    """900 overrides each a list of 2,000 items (each under 4,096 characters) kept Hydra's parser busy past
    two minutes: 65,536 characters in all is the bound."""
    many = [f"+x{i}=[{','.join(['1'] * 1990)}]" for i in range(900)]
    gone = drift(_record(overrides=[*_OVERRIDES, *many]))
    assert gone.error is not None and "(at most 65,536 in all)" in gone.error


def test_a_sweeps_jobs_expand_as_hydras_basic_sweeper_does() -> None:
    """The preset's sweeper params first, the command line overriding a key of theirs in its place (the
    last value wins), Hydra's own overrides left out; job n is item n of the product."""
    jobs = command_jobs(["model=gcn,gat", "train.seed=0,1", "hydra.sweep.dir=x"],
                      {"chunks": "1,2", "model": "sage"})
    assert len(jobs) == 8 and jobs[0] == ["chunks=1", "model=gcn", "train.seed=0"]
    assert jobs[3] == ["chunks=1", "model=gat", "train.seed=1"] and jobs[4][0] == "chunks=2"


def _reference_presets() -> list[str]:
    return sorted(p.name for p in REFERENCE.iterdir() if p.is_dir())


@pytest.mark.parametrize("preset", _reference_presets())
def test_every_reference_is_reproduced_by_its_preset_at_this_commit(preset: str) -> None:
    """Every committed reference's records keep their overrides (those of records written before records
    kept them backfilled exactly: experiments/backfill_overrides.py), and each composes at this commit to
    the configuration the record holds, on every key that changes what a run computes. A reference that
    no longer does lives in results/archive/, beside the commit that reproduces it."""
    drifts = recompose(REFERENCE / preset)
    assert drifts, f"{preset}: no record"
    kept_none = [str(d.path) for d in drifts if d.overrides is None]
    assert not kept_none, f"{preset}: {len(kept_none)} records keep no overrides, e.g. {kept_none[0]}"
    drifted = {str(d.path): d.error or d.differs for d in drifts if d.error or d.differs}
    assert not drifted, f"{preset}: {len(drifted)} records drift, e.g. {next(iter(drifted.items()))}"


@pytest.mark.parametrize("overrides", [
    [*_OVERRIDES, "train.seed=7"],
    ["model=gcn", "dataset=synthetic", "microbatch.fanouts=[10,5]", "microbatch.halo=sampled", "chunks=4"],
    ["experiment=sampled_map", "map_setting=historical_k8", "train.seed=3", "dataset=amazon_computers_dense"],
    ["++model.hidden=4", "chunks=2"],  # a forced add: composed whole
])
def test_recomposing_composes_as_hydra_does(overrides: list[str]) -> None:
    """Records are recomposed with their group choices composed once (each record applying its other
    overrides as Hydra does): the same configuration as Hydra's own composition."""
    expected = config_container(compose_config(overrides))
    assert config_container(composed_now(overrides)) == expected
