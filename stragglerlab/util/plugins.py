"""One registry shape for everything pluggable: name -> lazy import, a base type, entry points.

Detectors, injectors and figures each keep a `Registry`: built-ins as
"module:attr" strings (or "module" for a module that is itself the plug-in,
as figures are), imported on first use so listing names stays cheap, plus
third-party plug-ins declared by other packages under an entry-point group:

    [project.entry-points."stragglerlab.detectors"]
    mydet = "my_package.module:MyDetector"

    DETECTORS = Registry("detector", "stragglerlab.detectors", {...}, check=is_detector)
    DETECTORS.names(); DETECTORS.load("whatif")
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points

from stragglerlab.util.errors import InputError


@dataclass(kw_only=True)
class Registry:
    """Plug-ins of one kind, by name."""

    kind: str
    """What a plug-in is, for messages ("detector", "injector", "figure")."""
    group: str
    """Entry-point group third-party packages register under."""
    builtin: dict[str, str]
    """Built-in name -> "module:attr" (or "module"); their order is the listing order."""
    check: Callable[[object], str | None] = lambda obj: None
    """Returns why a loaded object is not a valid plug-in, or None when it is."""
    _cache: dict[str, object] = field(default_factory=dict, repr=False)

    def plugins(self) -> dict[str, str]:
        """Third-party name -> "module:attr" from installed packages' entry points."""
        return {ep.name: ep.value for ep in entry_points(group=self.group)}

    def names(self) -> list[str]:
        """Built-ins in their order, then plug-ins sorted (a plug-in cannot shadow a built-in)."""
        return list(self.builtin) + sorted(n for n in self.plugins() if n not in self.builtin)

    def spec(self, name: str) -> str:
        """The "module:attr" of `name`; InputError listing the known names if unknown."""
        spec = self.builtin.get(name) or self.plugins().get(name)
        if spec is None:
            raise InputError(f"unknown {self.kind} {name!r}; available: {', '.join(self.names())}")
        return spec

    def load(self, name: str) -> object:
        """The plug-in object (class or module) called `name`, imported once."""
        if name not in self._cache:
            spec = self.spec(name)
            module_name, _, attr = spec.partition(":")
            try:
                obj = importlib.import_module(module_name)
                if attr:
                    obj = getattr(obj, attr)
            except (ImportError, AttributeError) as e:
                raise InputError(f"{self.kind} {name!r} ({spec}) cannot be loaded: {e}; "
                                 "reinstall the package that provides it") from e
            why = self.check(obj)
            if why:
                raise InputError(f"{self.kind} {name!r} ({spec}) {why}")
            self._cache[name] = obj
        return self._cache[name]
