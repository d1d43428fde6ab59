"""autograder/tree.py: a tree someone else wrote, walked, read and copied within bounds, iteratively,
following no link, through descriptors on both sides."""
from __future__ import annotations

import inspect
import os
import sys

import pytest

from autograder import tree


def nested(top, names: list[str], leaf: str | None = None) -> None:
    """Folders ``names`` one inside the other under ``top``, made through descriptors (no full path), and
    a file ``leaf`` in the last."""
    fd = os.open(top, tree.OPEN_FOLDER)
    try:
        for name in names:
            os.mkdir(name, dir_fd=fd)
            sub = os.open(name, tree.OPEN_FOLDER, dir_fd=fd)
            os.close(fd)
            fd = sub
        if leaf:
            os.close(os.open(leaf, tree.CREATE_FILE, 0o600, dir_fd=fd))
    finally:
        os.close(fd)


def read(path, bounds=tree.Bounds()) -> tree.Tree:
    with tree.open_folder(path) as fd:
        return tree.read_tree(fd, bounds)


def test_a_deep_tree_is_walked_without_recursion_and_refused_past_its_depth(tmp_path):
    nested(tmp_path, ["d"] * 300, "bottom.txt")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 50)   # a walk of one frame per level fails here
    try:
        with tree.open_folder(tmp_path) as fd:
            entries = list(tree.walk(fd, tree.Bounds(depth=400)))
    finally:
        sys.setrecursionlimit(limit)
    assert len(entries) == 301 and entries[-1].path == "d/" * 300 + "bottom.txt"
    with pytest.raises(tree.OutOfBounds, match="deeper than 16"):
        read(tmp_path)


def test_long_names_are_copied_through_descriptors_or_refused_by_path_length(tmp_path):
    names = ["x" * 200] * 24   # 4,824 bytes: past PATH_MAX for any tool building full paths
    (tmp_path / "in").mkdir()
    nested(tmp_path / "in", names, "answers.py")
    with pytest.raises(tree.OutOfBounds, match="a path longer than 1024 bytes"):
        read(tmp_path / "in")
    taken = read(tmp_path / "in", tree.Bounds(depth=30, path_bytes=8000))
    with tree.open_folder(tmp_path) as fd:
        tree.write_tree(taken, fd, "out")
    copied = read(tmp_path / "out", tree.Bounds(depth=30, path_bytes=8000))
    assert copied.files == {"/".join(names) + "/answers.py": b""}
    (tmp_path / "named").mkdir()
    (tmp_path / "named" / ("n" * 255)).mkdir()
    with pytest.raises(tree.OutOfBounds, match="a name longer than 100 bytes"):
        read(tmp_path / "named", tree.Bounds(name_bytes=100))


def test_only_regular_files_are_read_and_no_link_is_followed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("answers")
    (tmp_path / "in" / "sub").mkdir(parents=True)
    (tmp_path / "in" / "sub" / "notebook.ipynb").write_text("{}")
    (tmp_path / "in" / "link.txt").symlink_to(secret)
    (tmp_path / "in" / "folder-link").symlink_to(tmp_path)
    os.mkfifo(tmp_path / "in" / "pipe")
    taken = read(tmp_path / "in")
    assert taken.files == {"sub/notebook.ipynb": b"{}"} and taken.folders == ["sub"]
    assert sorted(taken.left_out) == ["folder-link", "link.txt", "pipe"]
    with pytest.raises(OSError):   # the top itself may not be a link
        read(tmp_path / "in" / "folder-link")


@pytest.mark.parametrize(("bounds", "why"), [
    (tree.Bounds(entries=10), "more than 10 entries"),
    (tree.Bounds(file_bytes=1000), "a file over 1000 bytes"),
    (tree.Bounds(total_bytes=5000), "over 5000 bytes in all"),
])
def test_entries_and_bytes_are_bounded(tmp_path, bounds, why):
    for i in range(12):
        (tmp_path / f"f{i:02}").write_bytes(b"." * 800 * (2 if i == 11 else 1))
    with pytest.raises(tree.OutOfBounds, match=why):
        read(tmp_path, bounds)
    assert len(read(tmp_path).files) == 12


def test_a_copy_never_writes_through_what_is_already_there(tmp_path):
    taken = tree.Tree(files={"a.txt": b"x"})
    (tmp_path / "out").symlink_to(tmp_path / "elsewhere")
    with tree.open_folder(tmp_path) as fd, pytest.raises(FileExistsError):
        tree.write_tree(taken, fd, "out")
    assert not (tmp_path / "elsewhere").exists()


def test_a_kernels_deep_folder_is_made_safe_and_copied_without_recursion(tmp_path):
    """A kernel may nest its folders as deep as it likes: the link at the bottom is removed, and the copy
    between the notebook and the sandbox reaches the bottom, on the same iterative walk."""
    kernel_folder, copy = tmp_path / "notebook", tmp_path / "copy"
    kernel_folder.mkdir()
    copy.mkdir()
    nested(kernel_folder, ["d"] * 300, "bottom.txt")
    bottom = kernel_folder.joinpath(*["d"] * 300)
    (bottom / "link").symlink_to(tmp_path)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 50)   # a walk of one frame per level fails here
    try:
        changed = tree.remove_link_hazards(str(kernel_folder))
        left_out = tree.copy_tree(str(kernel_folder), str(copy))
    finally:
        sys.setrecursionlimit(limit)
    assert changed == ["d/" * 300 + "link"] and sorted(os.listdir(bottom)) == ["bottom.txt"]
    assert left_out == [] and copy.joinpath(*["d"] * 300, "bottom.txt").is_file()
