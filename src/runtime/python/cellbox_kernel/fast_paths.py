"""Exact shortcuts around IPython's per-cell work, for the cells that cannot need it.

IPython 8.5 pays, for every cell, costs that grow with the cell or with the number of
formatters, whether or not the cell uses what they look for:
  - the token transforms (magics `%x`, `!cmd`, `obj?`, `,f a b`) tokenize the whole cell in
    pure Python: ~17 µs a line;
  - the display hook tokenizes the whole cell again to find a trailing `;`;
  - an execute_result asks all twelve formatters, through traitlets, about e.g. an int.
On the 2-core dev VM that was ~0.7 ms of a 22-line cell and ~60 µs of a trivial one.

Each shortcut applies only when a cheap test proves the slow path's answer: a superset of what
the slow path looks for is absent, or every formatter but text/plain would answer None. Anything
else (a user's own transformer, a formatter registered for int, a `?` in a string) takes
IPython's own code. tests/kernel/test_fast_paths.py compares both on the cases that matter.
"""
import os
import re

from IPython.core import formatters
from IPython.core.displayhook import DisplayHook
from IPython.core.formatters import DisplayFormatter
from IPython.core.inputtransformer2 import (EscapedCommand, HelpEnd, MagicAssign, SystemAssign,
                                            TransformerManager)

# ---------------------------------------------------------------------- token transforms

# What the four token transformers can find is a token `%` (MagicAssign, EscapedCommand), `!`
# (SystemAssign, EscapedCommand) or `?` (HelpEnd, EscapedCommand), or a logical line whose first
# token is `,` `;` `/` (EscapedCommand's autocall escapes; a logical line starts a physical one,
# after its indentation). A `%` or `!` followed by `=` is the token `%=` or `!=` instead, so
# `a != b` needs no tokenizing. Any other match, in a string or a comment too, sends the cell the
# slow way.
_TOKEN_TRANSFORM_TRIGGERS = re.compile(r"[%!](?!=)|\?|^\s*[,;/]", re.MULTILINE)
_DEFAULT_TOKEN_TRANSFORMERS = [MagicAssign, SystemAssign, EscapedCommand, HelpEnd]


class CellTransformerManager(TransformerManager):
    """IPython's TransformerManager, minus the tokenizing of cells no token transform can match."""

    def do_token_transforms(self, lines):
        if (self.token_transformers == _DEFAULT_TOKEN_TRANSFORMERS
                and not _TOKEN_TRANSFORM_TRIGGERS.search("".join(lines))):
            return lines
        return super().do_token_transforms(lines)


# ---------------------------------------------------------------------- trailing `;`

def input_ends_with_semicolon(displayhook):
    """DisplayHook.quiet(): only an OP `;` token silences, and it needs a `;` in the text."""
    try:
        cell = displayhook.shell.history_manager.input_hist_parsed[-1]
    except IndexError:
        return False
    if ";" not in cell:
        return False
    return DisplayHook.quiet(displayhook)


# ---------------------------------------------------------------------- formatters

def _call_format_error_catcher_directly():
    """IPython wraps each formatter's __call__ in catch_format_error through the `decorator`
    package, whose wrapper binds the call's inspect.Signature on every call: ~12 binds for every
    execute_result (one per formatter), a tenth of a trivial cell's time in the kernel. Call the
    same catcher without the bind. Calls that pass the object by keyword keep the original
    wrapper (the catcher reads the object from its positional arguments)."""
    catcher = getattr(formatters.catch_format_error, "__wrapped__", None)
    if catcher is None:
        return  # another IPython or decorator: leave its formatters as they are
    for cls in vars(formatters).values():
        wrapped = vars(cls).get("__call__") if isinstance(cls, type) else None
        method = getattr(wrapped, "__wrapped__", None)
        code = getattr(wrapped, "__code__", None)
        if method is None or code is None or os.path.basename(code.co_filename) != "decorator.py":
            continue

        def call(self, *args, _method=method, _wrapped=wrapped, **kwargs):
            if not args:
                return _wrapped(self, *args, **kwargs)
            return catcher(_method, self, *args, **kwargs)

        call.__name__, call.__qualname__, call.__doc__ = "__call__", wrapped.__qualname__, wrapped.__doc__
        call.__wrapped__ = method
        cls.__call__ = call


_call_format_error_catcher_directly()


# Exact built-in types: their instances take no attributes of their own, so none has a
# _repr_html_ or any other print method; only a registration can make a formatter answer.
_BUILTIN_VALUE_TYPES = frozenset({int, float, complex, bool, str, bytes, list, tuple, dict, set,
                                  frozenset, range})

# The formatter classes whose answer for such a value the test below predicts, each with the
# __call__ IPython gives it (the decorator's wrapper replaced, above). Any other class that keeps
# BaseFormatter's own __call__ and lookups (the chart formatter, charts.py) answers as they do.
_PREDICTABLE_CALLS = {cls: cls.__call__ for cls in (
    formatters.HTMLFormatter, formatters.MarkdownFormatter, formatters.SVGFormatter,
    formatters.PNGFormatter, formatters.PDFFormatter, formatters.JPEGFormatter,
    formatters.LatexFormatter, formatters.JSONFormatter, formatters.JavascriptFormatter,
    formatters.IPythonDisplayFormatter, formatters.MimeBundleFormatter)}
_BASE = formatters.BaseFormatter
_BASE_LOOKUP = (_BASE.lookup, _BASE.lookup_by_type, _BASE._in_deferred_types)


def _answers_nothing(formatter, obj, mro):
    """Whether formatter(obj) is None (or False) for sure: BaseFormatter.__call__ read
    backwards — disabled, or no singleton, type or deferred printer for obj and no print method."""
    cls = type(formatter)
    if (_PREDICTABLE_CALLS.get(cls, _BASE.__call__) is not cls.__call__
            or (cls.lookup, cls.lookup_by_type, cls._in_deferred_types) != _BASE_LOOKUP):
        return False
    # The traits' stored values: what their descriptors return, at a tenth of the cost. A trait
    # never read yet (not stored) sends the value the slow way.
    values = formatter._trait_values  # noqa: SLF001
    try:
        if not values["enabled"]:
            return True
        singletons, types, deferred = (values["singleton_printers"], values["type_printers"],
                                       values["deferred_printers"])
        print_method = values["print_method"]
    except KeyError:
        return False
    if id(obj) in singletons or hasattr(mro[0], print_method):
        return False
    for klass in mro:
        if klass in types or (klass.__module__, klass.__name__) in deferred:
            return False
    return True


class CellDisplayFormatter(DisplayFormatter):
    """IPython's DisplayFormatter; a built-in value no other formatter would render goes to
    text/plain alone."""

    def format(self, obj, include=None, exclude=None):
        if include is None and exclude is None and type(obj) in _BUILTIN_VALUE_TYPES:
            plain = self.formatters.get("text/plain")
            mro = type(obj).__mro__
            others = [self.ipython_display_formatter, self.mimebundle_formatter]
            others += [f for name, f in self.formatters.items() if name != "text/plain"]
            if plain is not None and all(_answers_nothing(f, obj, mro) for f in others):
                return self._plain_text_only(plain, obj)
        return super().format(obj, include, exclude)

    @staticmethod
    def _plain_text_only(plain, obj):
        """What format() returns when text/plain is the only formatter with an answer."""
        format_dict, md_dict = {}, {}
        data, md = plain(obj), None
        if isinstance(data, tuple) and len(data) == 2:
            data, md = data
        if data is not None:
            format_dict["text/plain"] = data
        if md is not None:
            md_dict["text/plain"] = md
        return format_dict, md_dict
