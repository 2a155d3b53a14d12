"""The one walk over a folder tree that readers of outside folders use (results folders, sweep folders):
``os.walk``'s listing, top-down, done without recursion and bounded in depth.

Python 3.11's ``os.walk`` and ``Path.rglob`` recurse once per level: a results folder 1,000 folders deep
(a few KB of empty folders) ended the runs table and the reproduction check in a RecursionError. Runs
and sweeps write a few levels (a sweep's ``subdir`` of any depth included), so deeper than `MAX_DEPTH`
is refused in one error naming the folder, not read in part.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Iterator

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: The most folders below the walked one that a walk enters.
MAX_DEPTH = 64


class FolderTooDeep(OSError):
    """A folder tree nests past `MAX_DEPTH` below the walked folder (it names the folder reached)."""


def walk(root: str | Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(root)``'s triples (folder, its folders, its other entries), top-down, in its order: a
    link to a folder is listed among the folders and not followed; a folder that cannot be listed is passed
    over.

    Raises:
        FolderTooDeep: a folder more than `MAX_DEPTH` levels below ``root`` holds a folder.
    """
    stack = [(os.fspath(root), 0)]
    while stack:
        top, depth = stack.pop()
        try:
            with os.scandir(top) as entries:
                listed = list(entries)
        except OSError:
            continue
        folders: list[str] = []
        files: list[str] = []
        entered: list[str] = []  # the folders that are no links (scandir knows it: no call per folder)
        for entry in listed:
            try:
                is_folder = entry.is_dir()
            except OSError:
                is_folder = False
            (folders if is_folder else files).append(entry.name)
            if is_folder and not entry.is_symlink():
                entered.append(entry.path)
        yield top, folders, files
        if entered and depth >= MAX_DEPTH:
            raise FolderTooDeep(errno.ELOOP, f"{top} nests folders more than {MAX_DEPTH} levels below "
                                f"{root}: more than runs and sweeps write; not read further")
        stack.extend((path, depth + 1) for path in reversed(entered))
