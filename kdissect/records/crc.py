"""CRC32C (Castagnoli) at C speed, from the `crc32c` package's extension module.

`import crc32c` runs the package's __init__, which asks importlib.metadata for
its own version: about 12 ms at every start, more than the rest of the
records package. The extension module is loaded on its own when it can be
found next to that __init__; otherwise the package is imported normally.
"""

from __future__ import annotations

from typing import Callable


def _load() -> Callable[..., int]:
    try:
        import sys
        from importlib.machinery import ExtensionFileLoader, PathFinder
        from importlib.util import find_spec, module_from_spec

        loaded = sys.modules.get("crc32c")
        if loaded is not None:
            return loaded.crc32c
        package = find_spec("crc32c")  # finds, does not import
        locations = package.submodule_search_locations if package is not None else None
        spec = PathFinder.find_spec("_crc32c", list(locations or ()))
        if spec is not None and isinstance(spec.loader, ExtensionFileLoader):
            spec.name = "crc32c._crc32c"  # the extension's own name (its init function is PyInit__crc32c)
            module = module_from_spec(spec)
            spec.loader.exec_module(module)
            function = module.crc32c
            if function(b"123456789") == 0xE3069283:  # the check value of CRC-32C
                return function
    except Exception:  # any surprise: the ordinary import below
        pass
    import crc32c as package_module

    return package_module.crc32c


crc32c = _load()
