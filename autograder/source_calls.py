"""What a submission's code calls, read on the grading side from the submitted notebook.

Some checks forbid a built-in (02's softmax, 06's scaled_dot_product_attention, 08's norms). The kernel
reports the torch functions it saw called (protocol.Watch), but the kernel runs the student's code, which
can hide a call from that record (``torch._C.DisableTorchFunction()``) or rewrite the record. The judge
adds to what the kernel reports the names this module finds in the submitted source, so that a rule
holds without the kernel's word: a call hidden from the record is still in the source. (A name built at
run time, ``getattr(F, "soft" + "max")``, is in neither; the outputs are still compared.)
"""
from __future__ import annotations

import ast
import re

from IPython.core.inputtransformer2 import TransformerManager

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def called_by(sources: list[str], name: str) -> tuple[str, ...]:
    """The names of the functions, methods and classes that ``name``'s definition uses, and those of the
    submission's own top-level definitions it names (followed, transitively), in ``sources`` (code cells);
    a class also by its name in snake_case (``nn.RMSNorm`` → ``rms_norm``, the functional form it calls).
    The submission's own names (its functions, methods, parameters, variables and attributes) are left out."""
    trees = [_parse(source) for source in sources]
    definitions = {target: node for tree in trees for node in tree.body for target in _defined(node)}
    own_names = set(definitions) | {name for tree in trees for name in _own(tree, attributes=False)}
    own_attributes = {name for tree in trees for name in _own(tree, attributes=True)}
    used, seen, todo = [], set(), [name]
    while todo:
        node = definitions.get(todo.pop())
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in definitions:
                todo.append(sub.id)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in own_names:
                used.append(sub.id)
            elif isinstance(sub, ast.Attribute) and sub.attr not in own_attributes:
                used.append(sub.attr)
    return tuple(dict.fromkeys([*used, *(_CAMEL.sub("_", n).lower() for n in used if n[:1].isupper())]))


def _parse(source: str) -> ast.Module:
    """A cell's code as Python (its IPython magics transformed); an empty module if it is not Python."""
    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError):
        return ast.Module(body=[], type_ignores=[])


def _defined(node: ast.stmt) -> list[str]:
    """The top-level names a statement defines (a def, a class, an assignment)."""
    if isinstance(node, _DEFINITIONS):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)]
    return []


def _own(tree: ast.Module, attributes: bool):
    """The names the code gives: its methods and the attributes it sets (``attributes``), or its functions,
    classes, parameters and variables."""
    for node in ast.walk(tree):
        if attributes and isinstance(node, ast.ClassDef):
            yield from (item.name for item in node.body if isinstance(item, _DEFINITIONS))
        elif attributes and isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            yield node.attr
        elif not attributes and isinstance(node, _DEFINITIONS):
            yield node.name
        elif not attributes and isinstance(node, ast.arg):
            yield node.arg
        elif not attributes and isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            yield node.id
