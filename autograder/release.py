"""What a class is given holds no answer of an open assignment: the cells that quote one are withheld.

A source notebook quotes the book's code after an exercise's check (a cell tagged
``shows-answer:<exercise>``), for the learner to compare with their own once it passes; a later section's
demo may be written with an earlier answer. In the self-study course that is the point; in a class it is
the answer of an open assignment. :func:`without_shown_answers` puts a note in the place of each such cell
and of each later demo that uses what it defined (the notebook then still runs top to bottom), for the class
edition's notebooks (autograder/edition.py) and for what nbgrader releases (:class:`ClearShownAnswers`, in the
course's ``GenerateAssignment.preprocessors``). The cells come back once the assignment is closed (the class
edition's ``--answers-through``, this preprocessor's ``answers_through``). ``course.py build`` turns the
preprocessor off for the self-study notebooks/ (autograder/build.py).
"""
from __future__ import annotations

import ast
from pathlib import Path

import nbformat
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Unicode

from utils.notebook import SHOWN_LATER, cell_kind, exercises, shown_answers
from utils.sections import section_ids

NEEDS_SHOWN = ("> 这里原本是一个演示，它用到上面那段截止之后才给出的代码；截止之后随答案一起给出。")


def without_shown_answers(nb: dict, closed: set[str]) -> dict:
    """``nb`` with a note in place of every cell that shows an answer of an exercise not in ``closed``, and of
    every later demo cell that uses a name such a cell defined (not redefined in between by a cell that stays)."""
    withheld: set[str] = set()             # names whose value comes from a withheld cell
    for i, cell in enumerate(nb["cells"]):
        shows = bool(shown_answers(cell) - closed)
        if cell["cell_type"] != "code":
            note = SHOWN_LATER if shows else None
        else:
            defined, used = _names(_text(cell))
            needs = cell_kind(cell) == "code" and bool(used & withheld)
            note = SHOWN_LATER if shows else NEEDS_SHOWN if needs else None
            withheld = withheld | defined if note else withheld - defined
        if note:
            nb["cells"][i] = _note_cell(note, cell.get("id", f"withheld-{i}"), _imports(_text(cell)))
    return nb


def _note_cell(note: str, cell_id: str, imports: list[str]):
    """A markdown cell of ``note``; a code cell of the note as comments and ``imports``, where the withheld cell
    imported something (later cells may use it)."""
    if not imports:
        return nbformat.from_dict({"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": note})
    comment = "\n".join("# " + line.removeprefix("> ") for line in note.splitlines())
    return nbformat.v4.new_code_cell("\n".join([comment, *imports]), id=cell_id)


def _imports(source: str) -> list[str]:
    """The import statements at a cell's top level, as written (none where Python cannot parse it)."""
    tree = _parsed(source)
    return [ast.get_source_segment(source, node) for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom))] if tree else []


def _parsed(source: str) -> ast.Module | None:
    """A code cell's syntax tree, IPython's % and ! lines blanked (None where Python cannot parse it)."""
    try:
        return ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line
                                   for line in source.splitlines()))
    except SyntaxError:
        return None


def _text(cell: dict) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def _names(source: str) -> tuple[set[str], set[str]]:
    """The names a code cell binds at its top level (but by imports: a module is the same whichever cell
    imported it) and the names it reads before binding them itself (IPython's % and ! lines aside); a cell
    Python cannot parse binds and reads everything it mentions."""
    tree = _parsed(source)
    if tree is None:
        words = _words(source)
        return words, words
    defined: set[str] = set()
    read_first: set[str] = set()
    for statement in tree.body:
        read_first |= _reads(statement) - defined
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(statement.name)
        elif not isinstance(statement, (ast.Import, ast.ImportFrom)):
            defined |= _stored(statement)
    return defined, read_first


def _reads(node: ast.AST) -> set[str]:
    """The names a statement reads, but those its own functions, lambdas and comprehensions bind."""
    inner = set()
    for scope in ast.walk(node):
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner |= {a.arg for a in (*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs,
                                      *filter(None, (scope.args.vararg, scope.args.kwarg)))}
            inner |= set().union(*(_stored(child) for child in ast.iter_child_nodes(scope)))
        elif isinstance(scope, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inner |= set().union(*(_stored(gen.target) for gen in scope.generators))
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - inner


def _stored(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _words(code: str) -> set[str]:
    return {word for word in "".join(c if c.isalnum() or c == "_" else " " for c in code).split()
            if word.isidentifier()}


def closed_exercises(source_dir: Path, answers_through: str) -> set[str]:
    """The exercises of the sections in ``source_dir`` up to ``answers_through`` (none for ""): every other one,
    of a later section or of one this folder does not hold, is open."""
    return {name for sid in section_ids(source_dir) if sid <= answers_through
            for name in exercises(nbformat.read(source_dir / sid / f"{sid}.ipynb", as_version=4))}


class ClearShownAnswers(NbGraderPreprocessor):
    """In what nbgrader generates for a class: a note in place of every cell that quotes an open exercise's
    answer, and of the demos that use it (:func:`without_shown_answers`)."""

    enabled = Bool(True, help="Withhold the cells that quote an open exercise's answer (a class's release); "
                              "False keeps them (the self-study notebooks).").tag(config=True)
    answers_through = Unicode("", help="The last section whose assignment is closed (as the class edition's "
                                       "--answers-through): cells quoting its answers or an earlier section's "
                                       "are kept. Empty: every answer is withheld.").tag(config=True)

    def preprocess(self, nb, resources):
        if self.enabled:
            course = CourseDirectory(config=self.config)
            source = Path(course.root) / course.source_directory
            nb = without_shown_answers(nb, closed_exercises(source, self.answers_through))
        return nb, resources
