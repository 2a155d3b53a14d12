"""The bounded walk over outside folders (pipegnn/folder_walk.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipegnn.folder_walk import MAX_DEPTH, FolderTooDeep, walk
from pipegnn.results.__main__ import main
from pipegnn.runs.record_writes import write_record

from tests.results.completed import completed


def _deep(root: Path, levels: int) -> Path:
    """``root`` with a chain of ``levels`` folders below it; the deepest."""
    root.mkdir()
    path = root
    for _ in range(levels):  # one makedirs of a 2,000-character path would pass PATH_MAX
        path = path / "d"
        path.mkdir()
    return path


def _remove_deep(root: Path) -> None:
    """Remove a chain that :func:`_deep` made, bottom-up (``shutil.rmtree`` recurses per level too, and
    pytest's clean-up of old temporary folders would end in a RecursionError)."""
    chain = [root]
    while (chain[-1] / "d").is_dir():
        chain.append(chain[-1] / "d")
    for folder in reversed(chain):
        for entry in folder.iterdir():
            if not entry.is_dir():
                entry.unlink()
        folder.rmdir()


def test_the_walk_lists_what_os_walk_lists(tmp_path: Path) -> None:
    """Top-down, in os.walk's order, a link to a folder listed and not followed, a link to nothing and
    a FIFO among the other entries."""
    for folder in ("a/b/c", "a/d", "e"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "a" / "x.txt").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    (tmp_path / "e" / "gone").symlink_to(tmp_path / "nothing")
    os.mkfifo(tmp_path / "a" / "d" / "fifo")
    assert list(walk(tmp_path)) == [(str(t), d, f) for t, d, f in os.walk(tmp_path)]


def test_a_tree_past_the_depth_is_refused_in_one_line(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A results folder 1,000 folders deep ended the runs table and --recompose in a RecursionError (Python
    3.11's os.walk and rglob recurse per level); each now ends in one line naming the folder, exit 2,
    while a tree of MAX_DEPTH levels is read whole."""
    write_record(_deep(tmp_path / "ok", MAX_DEPTH), completed({"chunks": 2}))
    assert main([str(tmp_path / "ok")]) == 0
    _deep(tmp_path / "deep", 1000)
    try:
        write_record(tmp_path / "deep", completed({"chunks": 2}))
        with pytest.raises(FolderTooDeep):
            list(walk(tmp_path / "deep"))
        capsys.readouterr()
        for argv in ([str(tmp_path / "deep")], ["--recompose", str(tmp_path / "deep")]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"nests folders more than {MAX_DEPTH} levels below" in err, err
    finally:
        _remove_deep(tmp_path / "deep")
