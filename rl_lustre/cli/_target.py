"""Loading the deployment a command names: ``path/to/script.py:name`` or ``package.module:name``.

The file is run as a module (not as ``__main__``, so its ``if __name__ == "__main__":``
block does not run), the way uvicorn and gunicorn load ``module:attr``; ``name`` may be
dotted (``module:configs.big``). It must be a :class:`~rl_lustre.Cluster`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RLLustreError

TARGET_RULE = "must be path/to/script.py:name (or package.module:name) naming a rl_lustre.Cluster"


def _fail(target: str, rule: str) -> ConfigError:
    return ConfigError("rl-lustre", "TARGET", target, rule)


def _load_module(target: str, where: str) -> Any:
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where).expanduser()
        if not path.is_file():
            raise _fail(target, f"{TARGET_RULE}; there is no file {str(path)!r}")
        path = path.resolve()
        module_name = f"_rl_lustre_target_{abs(hash(str(path)))}"
        if module_name in sys.modules:
            return sys.modules[module_name]
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise _fail(target, f"{TARGET_RULE}; {str(path)!r} cannot be loaded as Python")
        module = importlib.util.module_from_spec(spec)
        # Like `python script.py`: modules next to the script can be imported.
        sys.path.insert(0, str(path.parent))
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
        finally:
            sys.path.remove(str(path.parent))
        return module
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        if exc.name is not None and where.startswith(exc.name):
            raise _fail(target, f"{TARGET_RULE}; no module named {exc.name!r}") from exc
        raise


def load_target(target: str) -> Any:
    """The ``Cluster`` that ``target`` names.

    Examples:
        >>> load_target("nowhere.py")  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        rl_lustre.errors.ConfigError: rl-lustre.TARGET='nowhere.py': must be path/to/script.py:name
        (or package.module:name) naming a rl_lustre.Cluster; the ':name' part is missing

    Raises:
        ConfigError: the target is malformed, missing, or not a Cluster; or running the
            file raised an error that is not rl_lustre's own (rl_lustre's errors, such as
            a ``ConfigError`` from the ``Cluster(...)`` in it, pass through unchanged).
    """
    from ..cluster import Cluster

    where, sep, attr = target.rpartition(":")
    if not sep or not where or not attr:
        raise _fail(target, f"{TARGET_RULE}; the ':name' part is missing")
    if not all(part.isidentifier() for part in attr.split(".")):
        raise _fail(target, f"{TARGET_RULE}; {attr!r} is not a Python name")
    try:
        obj: Any = _load_module(target, where)
    except (RLLustreError, KeyboardInterrupt):
        raise
    except SystemExit as exc:
        raise _fail(
            target,
            f"{TARGET_RULE}; loading {where!r} called exit({exc.code!r}): "
            "guard its command-line code with `if __name__ == '__main__':`",
        ) from exc
    except Exception as exc:
        raise _fail(target, f"{TARGET_RULE}; loading {where!r} raised {type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = (
                sorted(k for k, v in vars(obj).items() if isinstance(v, Cluster)) if hasattr(obj, "__dict__") else []
            )
            hint = f" (Clusters there: {', '.join(names)})" if names else ""
            raise _fail(target, f"{TARGET_RULE}; {where!r} has no attribute {attr!r}{hint}")
        obj = getattr(obj, part)
    if not isinstance(obj, Cluster):
        raise _fail(target, f"{TARGET_RULE}; {attr!r} is a {type(obj).__name__}, not a Cluster")
    return obj
