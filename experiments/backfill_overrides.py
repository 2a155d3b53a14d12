"""Backfill the overrides of a reference's records written before records kept them, from the command
that ran their sweep (results/README's), and check that they are exact.

    .venv/bin/python experiments/backfill_overrides.py results/superseded/halo_modes [--under SWEEP] \
        [--write] -- experiment=halo_modes chunks=8
    .venv/bin/python experiments/backfill_overrides.py results/superseded/pipeline --jobs JOBS.json [--write]

Each record's job ``records/[SWEEP/]N/result.json`` gets job N's overrides of the sweep the command
(without ``-m``) ran over its preset's ``hydra.sweeper.params`` at the record's own commit
([`command_jobs`][pipegnn.results.reproduce.command_jobs], as Hydra's basic sweeper expands them). They are
exact when composing them with the presets of the record's own commit (its ``env.git_sha``, read from
git, run in a subprocess) gives the configuration the record holds, on the keys that change what a run
computes (records that no sweep made, a benchmark's: ``--jobs``, a JSON object of each record's key and
its overrides, as the benchmark composed them); ``--write`` puts them into the records (the archive packed
again) only when every record's are. Then each record is composed at this commit
([`drift`][pipegnn.results.reproduce.drift]): the keys that differ are printed. Exits 0 when every
record's overrides are exact and none drifted, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any, Sequence

import yaml

from pipegnn.results import archive
from pipegnn.results.record_files import record_of
from pipegnn.results.reproduce import command_jobs, computed_keys, drift
from pipegnn.run_record import RunRecord
from pipegnn.runs.record_writes import write_record

ROOT = Path(__file__).resolve().parent.parent

#: Composes each line's overrides (JSON lists on stdin) with the presets of the checkout named by argv[1]
#: (its ``conf`` and ``pipegnn``, on PYTHONPATH), printing each configuration as JSON: run with that
#: commit's code, since its schemas are what its records were made of.
_COMPOSE_AT = r"""
import json, sys
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from pipegnn import schema
schema.register()

def leaves(cfg, node, prefix):
    if OmegaConf.is_dict(node):
        return {k: leaves(cfg, node._get_node(k), f"{prefix}{k}.") for k in node.keys()}
    try:
        return OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(cfg, prefix[:-1])}),
                                      resolve=True, enum_to_str=True)["v"]
    except Exception:  # an interpolation of Hydra's runtime (a place, never what a run computes)
        return "<unresolved>"

with initialize_config_dir(config_dir=sys.argv[1] + "/conf", version_base="1.3"):
    for line in sys.stdin:
        cfg = compose("config", overrides=json.loads(line))
        print(json.dumps(leaves(cfg, cfg, ""), default=str), flush=True)
"""


def _checkout(sha: str, into: Path) -> Path:
    """The ``conf`` and ``pipegnn`` folders of commit ``sha`` below ``into``."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", sha, "conf", "pipegnn"], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def _params(sha: str, command: Sequence[str]) -> dict[str, Any] | None:
    """The ``hydra.sweeper.params`` of the experiment preset ``command`` chooses, at commit ``sha``."""
    chosen = [o.split("=", 1)[1] for o in command if o.lstrip("+").startswith("experiment=")]
    if not chosen:
        return None
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{sha}:conf/experiment/{chosen[-1]}.yaml"],
                          check=True, capture_output=True, text=True).stdout
    return (((yaml.safe_load(text) or {}).get("hydra") or {}).get("sweeper") or {}).get("params")


def _composed_at(sha: str, jobs: list[list[str]], scratch: Path) -> list[dict[str, Any]]:
    """Each of ``jobs`` composed with commit ``sha``'s presets and schemas."""
    tree = _checkout(sha, scratch / sha)
    done = subprocess.run([sys.executable, "-c", _COMPOSE_AT, str(tree)], cwd=tree, capture_output=True,
                          text=True, input="".join(json.dumps(job) + "\n" for job in jobs),
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"composing at {sha[:9]} failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a reference folder (its records.jsonl.gz)")
    parser.add_argument("--under", default="", help="the sweep below records/ whose records these are")
    parser.add_argument("--write", action="store_true", help="put exact overrides into the records")
    parser.add_argument("--jobs", type=Path, help="a JSON object: each record's key and its overrides")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)  # the sweep's overrides follow --
    args = parser.parse_args(argv[:cut])
    command = [o for o in argv[cut + 1:] if o != "-m"]
    if bool(args.jobs) == bool(command):
        parser.error("give the sweep's command (after --) or --jobs, one of them")
    given = json.loads(args.jobs.read_text()) if args.jobs else None
    packed = args.folder / archive.ARCHIVE_NAME
    files = archive.read(packed).files
    prefix = f"records/{args.under}/" if args.under else "records/"
    job_key = re.compile(re.escape(prefix) + r"[0-9]+/result\.json")
    mine = {key: value for key, value in files.items() if value.get("overrides") is None and (
        key in given if given is not None else job_key.fullmatch(key))}
    if not mine:
        raise SystemExit(f"{packed}: no record {'of --jobs' if given else f'below {prefix}<job>/'} without "
                         "overrides")
    records: dict[str, RunRecord] = {}
    for key, value in mine.items():
        if given is not None:
            records[key] = record_of({**value, "overrides": list(given[key])}, packed.parent / key)
            continue
        record = record_of(value, packed.parent / key)
        sha = record.env["git_sha"]
        jobs = command_jobs(command, _params(sha, command))
        number = int(key[len(prefix):].split("/")[0])
        if number >= len(jobs):
            raise SystemExit(f"{key}: job {number}, but the command makes {len(jobs)} jobs")
        records[key] = record_of({**value, "overrides": jobs[number]}, packed.parent / key)
    exact = True
    with tempfile.TemporaryDirectory() as scratch:
        for sha in sorted({r.env["git_sha"] for r in records.values()}):
            keys = [k for k, r in records.items() if r.env["git_sha"] == sha]
            composed = _composed_at(sha, [records[k].overrides for k in keys], Path(scratch))
            for key, then in zip(keys, composed):
                had, got = computed_keys(records[key].config), computed_keys(then)
                differs = sorted(k for k in had.keys() | got.keys() if had.get(k) != got.get(k))
                if differs:
                    exact = False
                    print(f"NOT EXACT {key} (at {sha[:9]}): " + "; ".join(
                        f"{k}: record {had.get(k)!r}, composed {got.get(k)!r}" for k in differs[:6]))
    drifted = 0
    for key, record in records.items():
        d = drift(record, key)
        if d.error or d.differs:
            drifted += 1
            why = d.error or "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in d.differs.items())
            print(f"drifts {key}: {why}")
    print(f"{len(records)} records below {prefix}: overrides {'exact' if exact else 'NOT exact'} at their "
          f"commits; {drifted} drift at this commit")
    if args.write and exact:
        with tempfile.TemporaryDirectory() as tmp:
            archive.unpack(packed, tmp)
            for key, record in records.items():
                where = Path(tmp, key)
                write_record(where.parent, {**json.loads(where.read_text()), "overrides": record.overrides})
            keys_before = archive.read(packed, keep=()).paths
            archive.pack(packed, archive.run_files(tmp, beside=("trace.json",)))
            assert archive.read(packed, keep=()).paths == keys_before
        print(f"wrote the overrides of {len(records)} records into {packed}")
    return 0 if exact and not drifted else 1


if __name__ == "__main__":
    sys.exit(main())
