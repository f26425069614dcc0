"""Undo pytest's guess of rootdir from *option values* it did not know yet (PITFALLS 3).

pytest finds its rootdir and ini file before it loads entry-point plugins, by parsing the
command line with only its own options.  `pytest --hostfile /tmp/x/hostfile` then reads
`/tmp/x/hostfile` as a test path, takes `/tmp/x` as rootdir, finds no ini file there, and so
loses `testpaths`, `addopts` and the markers; `--hostfile=/tmp/x/hostfile` does not.  Once our
options are known (this runs from `pytest_load_initial_conftests`, right after the plugins are
loaded), the setup is determined again from the real positional arguments; if it differs, the
config takes the corrected rootdir, ini file and addopts.  This touches pytest internals, so it
is guarded: if the internals are not what we expect, nothing is changed.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest


def repair(config: pytest.Config, args: list[str]) -> None:
    try:
        from _pytest.config.findpaths import determine_setup
    except ImportError:  # pragma: no cover - other pytest
        return
    ns = config.known_args_namespace
    needed = ("_rootpath", "_inipath", "_inicfg", "_inicache")
    if not all(hasattr(config, a) for a in needed):
        return
    params = inspect.signature(determine_setup).parameters
    kwargs: dict[str, Any] = {
        "inifile": getattr(ns, "inifilename", None),
        "override_ini": getattr(ns, "override_ini", None),
        "args": list(getattr(ns, "file_or_dir", []) or []),
        "rootdir_cmd_arg": getattr(ns, "rootdir", None) or None,
        "invocation_dir": config.invocation_params.dir,
    }
    if not set(kwargs) <= set(params):
        return
    try:
        result = determine_setup(**kwargs)
    except pytest.UsageError:
        return
    rootpath, inipath, inicfg = result[0], result[1], result[2]
    if rootpath == config.rootpath and inipath == config.inipath:
        return
    old_root, old_ini = config.rootpath, config.inipath
    config._rootpath = rootpath
    config._inipath = inipath
    config._inicfg = inicfg
    config._inicache.clear()
    extra = getattr(getattr(config, "_parser", None), "extra_info", None)
    if isinstance(extra, dict):
        extra["rootdir"] = str(rootpath)
        extra["inifile"] = str(inipath)
    cut = str(old_ini.parent) if old_ini is not None else str(old_root)
    if ns.confcutdir == cut:
        ns.confcutdir = str(inipath.parent) if inipath is not None else str(rootpath)
    if old_ini is None and inipath is not None:
        try:
            addopts = config.getini("addopts")
        except ValueError:
            addopts = []
        args[:] = list(addopts) + args
