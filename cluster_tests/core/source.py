"""Where the run's nodes come from: a DeepSpeed --hostfile, or a Slurm allocation, an MPI
hostfile or SkyPilot (core.nodelist), written out as the DeepSpeed hostfile that the run checks
(and T2 launches with)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from cluster_tests.core import nodelist as nl
from cluster_tests.core.nodelist import NodeListError
from cluster_tests.core.settings import Settings
from cluster_tests.judge.hostfile import hostparse as hf

__all__ = ["NodeListError", "RunNodes", "node_list"]


class RunNodes(NamedTuple):
    settings: Settings  # with the hostfile the run checks
    parse: hf.HostfileParse
    where: str  # where the nodes came from, for the report header
    notes: list[str]  # what the user must be told about how the list was read (the summary)


def node_list(settings: Settings, environ: Mapping[str, str], reports_dir: Path
              ) -> RunNodes | None:
    """The run's nodes, or None where no node source is given. `reports_dir`: where a hostfile
    written from another source goes unless --write-hostfile says. Raises NodeListError (a
    usage error) for a source that cannot be read."""
    v = settings.nodelist
    source = nl.choose_source(
        hostfile=str(settings.hostfile) if settings.hostfile else None,
        hostfile_from=settings.hostfile_source, mpi_hostfile=v.mpi_hostfile,
        environ=environ, nodes_from=v.nodes_from)
    if source is None:
        return None
    write = v.write_hostfile
    out = Path(write).expanduser().absolute() if write else None
    if source == "hostfile":
        if v.slots is not None:
            raise NodeListError(
                "--slots is for node lists without slot counts (Slurm, SkyPilot, MPI); the "
                "hostfile's slots= are what DeepSpeed uses")
        try:
            parse = nl.load_hostfile(str(settings.hostfile))
        except hf.HostfileError as exc:
            raise NodeListError(str(exc)) from None
        where = f"hostfile {settings.hostfile}" + nl.env_note(source, environ)
        if out is not None and parse.hosts:
            nl.write_hostfile(out, "".join(f"{h.name} slots={h.slots}\n"
                                                     for h in parse.hosts))
            where += f", checked lines written to {out}"
        return RunNodes(settings, parse, where, [])
    if out is None:
        out = reports_dir.absolute() / "hostfile"
    got = nl.resolve(source, mpi_hostfile=v.mpi_hostfile, slots=v.slots,
                               environ=environ, out=out)
    settings = dataclasses.replace(settings, hostfile=got.hostfile,
                                   hostfile_source=got.nodes.source)
    return RunNodes(settings, got.parse, got.description + nl.env_note(source, environ),
                    list(got.nodes.notes))
