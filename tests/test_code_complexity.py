"""Functions stay short enough to read: McCabe's cyclomatic complexity, counted here from the AST, within his limit of
10 where a module is held to it (the sweep's argument checks)."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def complexity(function):
    """McCabe's cyclomatic complexity of a function's AST, counted as radon counts it: 1, plus 1 for each if, elif,
    conditional expression, loop, except clause and comprehension clause, plus 1 for each `and` / `or` operand after
    the first."""
    count = 1
    for node in ast.walk(function):
        if isinstance(node, (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler)):
            count += 1
        elif isinstance(node, ast.comprehension):
            count += 1 + len(node.ifs)
        elif isinstance(node, ast.BoolOp):
            count += len(node.values) - 1
    return count


def test_complexity_counts_each_branch():
    source = ("def f(x):\n    if x and y or z:\n        return [a for a in x if a]\n    elif x:\n"
              "        return 1 if x else 2\n    for i in x:\n        try:\n            pass\n"
              "        except E:\n            pass\n    while x:\n        pass\n")
    function = ast.parse(source).body[0]
    assert complexity(function) == 1 + 1 + 2 + 2 + 1 + 1 + 1 + 1 + 1  # if, and/or, comprehension, elif, ?:, for, ...


def test_the_sweeps_arguments_are_checked_in_short_steps():
    """The walk of the sweep's arguments (SweepArguments' __post_init__ and each check it calls) stays readable:
    McCabe's limit of 10 for each function of papa/sweep/arguments.py."""
    tree = ast.parse((SRC / "papa" / "sweep" / "arguments.py").read_text(encoding="utf-8"))
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert "__post_init__" in {f.name for f in functions}
    assert {f.name: complexity(f) for f in functions if complexity(f) > 10} == {}
