"""The functions module of the AutoGen adapter: the Python file AutoGen's executors write into
their working directory so that executed code can `from functions import load_data`, built
from what AutoGen's executors accept as `functions`:

  FunctionWithRequirements     (autogen_core.code_executor; `.func`, `.python_packages`,
                                `.global_imports`), e.g. made by @with_requirements(...)
  FunctionWithRequirementsStr  (`.func` is source text), e.g. FunctionWithRequirements.from_str
  a plain callable             (its source, read with inspect)
  a source string              ("def f(): ...": one or more functions)

Objects are read by their attributes, so this works with or without autogen_core installed.
"""
import ast
import inspect
import textwrap

FUNCTION_PROMPT_TEMPLATE = """You have access to the following user defined functions. They can be accessed from the module called `$module_name` by their function names.

For example, if there was a function called `foo` you could import it by writing `from $module_name import foo`

$functions"""


def import_line(item):
    """One of AutoGen's global imports as a statement: "numpy" -> import numpy; Alias(name,
    alias) -> import name as alias; ImportFromModule(module, imports) -> from module import ..."""
    if isinstance(item, str):
        return f"import {item}"
    if hasattr(item, "module"):
        names = ", ".join(n if isinstance(n, str) else f"{n.name} as {n.alias}" for n in item.imports)
        return f"from {item.module} import {names}"
    if hasattr(item, "alias"):
        return f"import {item.name} as {item.alias}"
    raise TypeError(f"a global import is a str, an Alias or an ImportFromModule, not {type(item).__name__}")


def _without_first_decorator(source):
    """The source of a function wrapped by @with_requirements, without that decorator (the
    wrapper is not importable in the sandbox); later decorators stay."""
    tree = ast.parse(source)
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.decorator_list:
        return source
    start = node.decorator_list[1].lineno if len(node.decorator_list) > 1 else node.lineno
    return "\n".join(source.splitlines()[start - 1:])


def function_source(function):
    """The source text of one entry of `functions`."""
    if isinstance(function, str):
        return textwrap.dedent(function).strip("\n")
    inner = getattr(function, "func", None)
    if isinstance(inner, str):                                   # FunctionWithRequirementsStr
        return textwrap.dedent(inner).strip("\n")
    if inner is not None:                                        # FunctionWithRequirements
        return _without_first_decorator(textwrap.dedent(inspect.getsource(inner))).strip("\n")
    if callable(function):
        return textwrap.dedent(inspect.getsource(function)).strip("\n")
    raise TypeError(f"functions holds callables, FunctionWithRequirements(Str) or source strings, "
                    f"not {type(function).__name__}")


def module_source(functions):
    """The functions module: every global import once, in the order first named, then each
    function's source."""
    imports = []
    for function in functions:
        for item in getattr(function, "global_imports", None) or ():
            line = import_line(item)
            if line not in imports:
                imports.append(line)
    bodies = [function_source(f) for f in functions]
    return "\n".join(imports) + "\n\n\n" + "\n\n\n".join(bodies) + "\n"


def required_packages(functions):
    """The python_packages the functions ask for, each once, in order."""
    packages = []
    for function in functions:
        for package in getattr(function, "python_packages", None) or ():
            if package not in packages:
                packages.append(package)
    return packages


def _stubs_of_source(source):
    """`def name(signature):` + docstring + `...` for each top-level function in source text."""
    stubs = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            head = ast.get_source_segment(source, node).split("\n")
            signature = next(i for i, line in enumerate(head) if line.rstrip().endswith(":"))
            stub = "\n".join(line for line in head[:signature + 1] if not line.lstrip().startswith("@"))
            doc = ast.get_docstring(node)
            stubs.append(stub + (f'\n    """{doc}"""' if doc else "") + "\n    ...")
    return stubs


def prompt(functions, module_name, template=FUNCTION_PROMPT_TEMPLATE):
    """AutoGen's prompt naming the functions and how to import them ($module_name, $functions)."""
    stubs = []
    for function in functions:
        stubs.extend(_stubs_of_source(function_source(function)))
    return template.replace("$module_name", module_name).replace("$functions", "\n\n".join(stubs))
