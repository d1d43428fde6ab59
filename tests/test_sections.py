"""What a section is, for every tool that lists them (utils/sections.py): a folder NN_name holding NN_name.ipynb."""
from __future__ import annotations

from pathlib import Path

from utils.sections import section_ids


def make(folder: Path, *files: str) -> None:
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}", encoding="utf-8")


def test_a_section_is_a_numbered_folder_with_its_own_notebook(tmp_path):
    make(tmp_path / "solutions", "02_b/02_b.ipynb", "01_a/01_a.ipynb", "03_c/other.ipynb", "notes/notes.ipynb",
         "4_d/4_d.ipynb")
    (tmp_path / "solutions" / "06_f").mkdir()
    assert section_ids(tmp_path / "solutions") == ["01_a", "02_b"]


def test_sections_of_several_folders_are_listed_once_in_order_and_a_missing_folder_holds_none(tmp_path):
    make(tmp_path / "solutions", "02_b/02_b.ipynb")
    make(tmp_path / "notebooks", "02_b/02_b.ipynb", "01_a/01_a.ipynb")
    assert section_ids(tmp_path / "solutions", tmp_path / "notebooks", tmp_path / "none") == ["01_a", "02_b"]
