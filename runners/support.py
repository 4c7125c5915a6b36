"""Helpers shared by the runner modules: flags the user gave, endpoints, staging our code."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

PROBE_TIMEOUT_S = 3.0  # every reachability probe (DNS + TCP connect) gives up after this
WORKER_PLUGIN = "runners.worker_setup"  # not imported here: importing it limits this process


class RunnerError(ValueError):
    """The runner flags cannot work (message says which flag and why)."""


def given_flags(argv: list[str]) -> set[str]:
    """Names (without dashes) of the ``--flags`` present on the command line."""
    return {a[2:].split("=", 1)[0].replace("-", "_") for a in argv if a.startswith("--")}


def unknown_flags(argv: list[str]) -> list[str]:
    """Flags no PipelineOptions class (ours or Beam's) knows: Beam would drop them silently."""
    found: list[str] = []

    def probe(parser) -> None:  # sees Beam's parser before it learns the unknown flags
        _, unknown = parser.parse_known_args(argv)
        found.extend(a.split("=", 1)[0] for a in unknown if a.startswith("-"))

    PipelineOptions(argv).get_all_options(add_extra_args_fn=probe, retain_unknown_options=True)
    return found


def host_port(address: str, default_port: int) -> tuple[str, int]:
    """``host:port``, ``http://host:port`` or ``host`` -> (host, port).

    Raises:
      ValueError: not an address.
    """
    parsed = urlparse(address if "://" in address else f"tcp://{address}")
    if not parsed.hostname:
        raise ValueError(f"not a host:port address: {address!r}")
    return parsed.hostname, parsed.port or default_port


def unreachable(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why ``host:port`` does not accept a TCP connection within `timeout` s (None if it does).

    Name resolution happens in a daemon thread, so a slow DNS cannot stretch the wait.
    """
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.append(None)
        except OSError as e:
            outcome.append(e.strerror or type(e).__name__)

    thread = threading.Thread(target=connect, daemon=True, name=f"probe-{host}:{port}")
    thread.start()
    thread.join(timeout + 0.5)
    return outcome[0] if outcome else f"no answer within {timeout:g} s"


def add_plugin(options: PipelineOptions, plugin: str = WORKER_PLUGIN) -> None:
    """Appends `plugin` to ``--beam_plugins`` (imported by each SDK worker at start-up)."""
    setup = options.view_as(SetupOptions)
    plugins = list(setup.beam_plugins or [])
    if plugin not in plugins:
        setup.beam_plugins = [*plugins, plugin]


def project_setup_file() -> Path | None:
    """This project's root setup.py (a source checkout or ``pip install -e .``), if any."""
    path = Path(__file__).resolve().parents[1] / "setup.py"
    return path if path.is_file() else None


def stage_project(options: PipelineOptions, *, image_has_it: bool = False) -> None:
    """Ships our packages to workers that install staged files (Dataflow, Docker, PROCESS).

    Fills ``--setup_file`` with the project's setup.py unless one was given: Beam builds an
    sdist of it at submission and each worker pip-installs it before running anything.

    Args:
      options: the pipeline options (modified in place).
      image_has_it: the worker image already contains this project (``--sdk_container_image``
        built from our requirements): staging is then optional.

    Raises:
      RunnerError: a given --setup_file or --requirements_file does not exist, or no setup.py
        can be found and the image does not contain the project.
    """
    setup = options.view_as(SetupOptions)
    for flag in ("setup_file", "requirements_file"):
        value = getattr(setup, flag)
        if value and not os.path.isfile(value):
            raise RunnerError(f"--{flag} {value}: no such file")
    if setup.setup_file:
        return
    found = project_setup_file()
    if found is not None:
        setup.setup_file = str(found)
    elif not image_has_it:
        raise RunnerError(
            "cannot find audiorecords' setup.py to ship our code to the workers: run from a "
            "source checkout, pass --setup_file PATH, or use --sdk_container_image with "
            "audiorecords installed"
        )
