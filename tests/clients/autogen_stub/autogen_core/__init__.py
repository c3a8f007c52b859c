"""Test stub of autogen_core's public interface (see ../README.md): CancellationToken and the
component model (Component, ComponentBase, ComponentModel), as autogen-core publishes them."""
import importlib
import threading
from typing import Any, Callable, ClassVar, Dict, Generic, List, Optional, TypeVar

ConfigT = TypeVar("ConfigT")


class CancellationToken:
    """cancel() runs every callback once; add_callback on a cancelled token runs it at once;
    link_future cancels the future on cancel()."""

    def __init__(self) -> None:
        self._cancelled = False
        self._lock = threading.Lock()
        self._callbacks: List[Callable[[], None]] = []

    def cancel(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()

    def is_cancelled(self) -> bool:
        with self._lock:
            return self._cancelled

    def add_callback(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if not self._cancelled:
                self._callbacks.append(callback)
                return
        callback()

    def link_future(self, future):
        self.add_callback(future.cancel)
        return future


class ComponentModel:
    """provider, component_type, version, component_version, description, config."""

    def __init__(self, provider: str, config: Dict[str, Any], component_type: Optional[str] = None,
                 version: Optional[int] = None, component_version: Optional[int] = None,
                 description: Optional[str] = None) -> None:
        self.provider, self.config, self.component_type = provider, config, component_type
        self.version, self.component_version, self.description = version, component_version, description

    def model_dump(self, exclude_none: bool = False) -> Dict[str, Any]:
        data = {"provider": self.provider, "component_type": self.component_type, "version": self.version,
                "component_version": self.component_version, "description": self.description,
                "config": self.config}
        return {k: v for k, v in data.items() if v is not None} if exclude_none else data


class ComponentBase(Generic[ConfigT]):
    """_to_config, dump_component (provider: component_provider_override or module.qualname)
    and load_component (imports the provider, validates config with its component_config_schema,
    calls its _from_config)."""

    component_type: ClassVar[str]
    component_version: ClassVar[int] = 1
    component_provider_override: ClassVar[Optional[str]] = None
    component_description: ClassVar[Optional[str]] = None

    def _to_config(self):
        raise NotImplementedError("This component does not support dumping to config")

    def dump_component(self) -> ComponentModel:
        provider = self.component_provider_override or f"{type(self).__module__}.{type(self).__qualname__}"
        if "<locals>" in provider:
            raise TypeError("Cannot dump component with local class")
        description = self.component_description
        if description is None and type(self).__doc__:
            description = type(self).__doc__.strip().split("\n\n")[0].strip()
        return ComponentModel(provider=provider, component_type=self.component_type,
                              version=self.component_version, component_version=self.component_version,
                              description=description, config=self._to_config().model_dump(exclude_none=True))

    @classmethod
    def load_component(cls, model, expected=None):
        if isinstance(model, dict):
            model = ComponentModel(**model)
        module_path, class_name = model.provider.rsplit(".", 1)
        component_class = getattr(importlib.import_module(module_path), class_name)
        config = component_class.component_config_schema.model_validate(model.config)
        instance = component_class._from_config(config)
        if not isinstance(instance, expected or cls):
            raise TypeError("Expected type does not match")
        return instance


class Component(Generic[ConfigT]):
    """The concrete side: component_config_schema and _from_config."""

    component_config_schema: Any

    @classmethod
    def _from_config(cls, config):
        raise NotImplementedError("This component does not support dumping to config")


__all__ = ["CancellationToken", "Component", "ComponentBase", "ComponentModel"]
