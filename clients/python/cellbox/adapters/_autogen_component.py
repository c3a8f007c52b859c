"""Serialization of the AutoGen adapter as AutoGen components have it: `dump_component()` gives a
ComponentModel {provider, component_type, version, component_version, description, config},
`_to_config()` the executor's config, `load_component(model)` / `_from_config(config)` an
executor back.

With autogen_core installed the async executor is a real autogen_core Component (AutoGen's own
dump_component and load_component run) and the config is a pydantic model, as AutoGen requires.
Without it, the same methods come from _Component below and the config is a dataclass with
pydantic's two methods that AutoGen calls (model_dump, model_validate). The token is never part
of a config: a loaded executor reads $CELLBOX_TOKEN or .cellbox/token, like Sandbox.create.
"""
import importlib
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, Optional

try:
    from autogen_core import ComponentModel
except ImportError:
    ComponentModel = None

try:
    from pydantic import BaseModel
except ImportError:
    BaseModel = None

PROVIDER = "cellbox.adapters.autogen.AsyncCellboxCodeExecutor"

if BaseModel is not None:
    class CellboxCodeExecutorConfig(BaseModel):
        """What an executor is made of: the daemon's url, the sandbox it was given (none: it
        creates its own), the context, per-block timeout, work_dir in the sandbox, output_dir on
        this machine, the functions module's name and Sandbox.create's other options."""

        url: Optional[str] = None
        sandbox_id: Optional[str] = None
        context: Optional[str] = None
        timeout: int = 60
        work_dir: Optional[str] = None
        output_dir: Optional[str] = None
        functions_module: str = "functions"
        sandbox_options: Dict[str, Any] = {}
else:
    @dataclass
    class CellboxCodeExecutorConfig:
        """What an executor is made of (see the pydantic form above: the same fields)."""

        url: Optional[str] = None
        sandbox_id: Optional[str] = None
        context: Optional[str] = None
        timeout: int = 60
        work_dir: Optional[str] = None
        output_dir: Optional[str] = None
        functions_module: str = "functions"
        sandbox_options: Dict[str, Any] = field(default_factory=dict)

        def model_dump(self, exclude_none=False):
            data = asdict(self)
            return {k: v for k, v in data.items() if v is not None} if exclude_none else data

        @classmethod
        def model_validate(cls, data):
            if isinstance(data, cls):
                return data
            unknown = set(data) - {f.name for f in fields(cls)}
            if unknown:
                raise ValueError(f"unknown fields in a CellboxCodeExecutor config: {sorted(unknown)}")
            return cls(**data)


if ComponentModel is None:
    @dataclass
    class ComponentModel:
        """autogen_core's ComponentModel, when autogen_core is not installed."""

        provider: str
        config: Dict[str, Any]
        component_type: Optional[str] = None
        version: Optional[int] = None
        component_version: Optional[int] = None
        description: Optional[str] = None

        def model_dump(self, exclude_none=False):
            data = asdict(self)
            return {k: v for k, v in data.items() if v is not None} if exclude_none else data


class _Component:
    """dump_component and load_component for when autogen_core is not there."""

    component_type = "code_executor"
    component_version = 1
    component_provider_override = PROVIDER
    component_description = "Runs code blocks in a cellbox sandbox: one persistent Python kernel and its shell."
    component_config_schema = CellboxCodeExecutorConfig

    def dump_component(self):
        return ComponentModel(provider=self.component_provider_override, component_type=self.component_type,
                              version=self.component_version, component_version=self.component_version,
                              description=self.component_description,
                              config=self._to_config().model_dump(exclude_none=True))

    @classmethod
    def load_component(cls, model, expected=None):
        if isinstance(model, dict):
            model = ComponentModel(**model)
        module_name, _, class_name = model.provider.rpartition(".")
        component_class = getattr(importlib.import_module(module_name), class_name)
        instance = component_class._from_config(component_class.component_config_schema.model_validate(model.config))
        if not isinstance(instance, expected or cls):
            raise TypeError(f"{model.provider} is not a {(expected or cls).__name__}")
        return instance
