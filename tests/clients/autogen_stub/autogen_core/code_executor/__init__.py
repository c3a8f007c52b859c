"""Test stub of autogen_core.code_executor's public interface (see ../../README.md)."""
import ast
import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, List, Sequence, Tuple, TypeVar, Union

from .. import CancellationToken, ComponentBase

T = TypeVar("T")


@dataclass
class CodeBlock:
    code: str
    language: str


@dataclass
class CodeResult:
    exit_code: int
    output: str


class CodeExecutor(ABC, ComponentBase[Any]):
    component_type = "code_executor"

    @abstractmethod
    async def execute_code_blocks(self, code_blocks: List[CodeBlock],
                                  cancellation_token: CancellationToken) -> CodeResult: ...

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def restart(self) -> None: ...

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, exc_type, exc_val, exc_tb):
        await self.stop()
        return None


@dataclass(frozen=True)
class Alias:
    name: str
    alias: str


@dataclass(frozen=True)
class ImportFromModule:
    module: str
    imports: Tuple[Union[str, Alias], ...]

    def __init__(self, module: str, imports):
        object.__setattr__(self, "module", module)
        object.__setattr__(self, "imports", tuple(imports))


Import = Union[str, ImportFromModule, Alias]


class FunctionWithRequirementsStr:
    """A function given as source text (exactly one function), with its requirements."""

    def __init__(self, func: str, python_packages: Sequence[str] = [], global_imports: Sequence[Import] = []):
        functions = [n for n in ast.parse(func).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if len(functions) != 1:
            raise ValueError("The string must contain exactly one function")
        self.func = func
        self.python_packages = python_packages
        self.global_imports = global_imports
        self._func_name = functions[0].name

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("String based function with requirement objects are not directly callable")


@dataclass
class FunctionWithRequirements(Generic[T]):
    func: Callable[..., T]
    python_packages: Sequence[str] = field(default_factory=list)
    global_imports: Sequence[Import] = field(default_factory=list)

    @classmethod
    def from_callable(cls, func, python_packages: Sequence[str] = [], global_imports: Sequence[Import] = []):
        return cls(python_packages=python_packages, global_imports=global_imports, func=func)

    @staticmethod
    def from_str(func: str, python_packages: Sequence[str] = [], global_imports: Sequence[Import] = []):
        return FunctionWithRequirementsStr(func=func, python_packages=python_packages, global_imports=global_imports)

    def __call__(self, *args, **kwargs):
        return self.func(*args, **kwargs)


def with_requirements(python_packages: Sequence[str] = [], global_imports: Sequence[Import] = []):
    def wrapper(func):
        wrapped = FunctionWithRequirements(python_packages=python_packages, global_imports=global_imports, func=func)
        functools.update_wrapper(wrapped, func)
        return wrapped
    return wrapper


__all__ = ["CodeBlock", "CodeExecutor", "CodeResult", "Alias", "ImportFromModule", "Import",
           "FunctionWithRequirements", "FunctionWithRequirementsStr", "with_requirements"]
