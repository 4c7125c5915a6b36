"""The checks that need the inputs' headers or the output directory's state (no I/O).

`check_inputs`: the signal dtype that holds every file exactly (`transforms.audio.dtypes`) and
``--strict``'s first bad file; `check_output_dir`: whether the run may write where it is told.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any

from pipelines.config import RecordConfig, UsageError, require
from transforms.audio.dtypes import resolve as resolve_signal_dtype
from transforms.audio.wav import WavInfo
from transforms.spec.types import InputFile


def check_inputs(config: RecordConfig, inputs: tuple[InputFile, ...]) -> str:
    """The signal dtype for the scanned `inputs`, after the checks that need their headers.

    Raises:
      UsageError: ``--signal_dtype`` cannot hold every file exactly, or ``--strict`` and a bad
        file (the first one is named).
    """
    bad = next((f for f in inputs if f.error), None)
    return checked_dtype(
        config, _Headers(inputs), None if bad is None else (bad.index, bad.path, bad.error)
    )


def checked_dtype(
    config: RecordConfig,
    headers: Collection[tuple[str, WavInfo]],
    first_bad: tuple[int, str, str] | None,
) -> str:
    """`check_inputs` from the (path, header) of every file with a header and the first bad
    file's (index, path, reason) (None: none)."""
    try:  # from the headers: a dtype that holds every file exactly, or one line saying why not
        dtype = resolve_signal_dtype(config.signal_dtype, headers)
    except ValueError as e:
        raise UsageError(str(e)) from e
    require(
        not (config.strict and first_bad),
        f"--strict: {first_bad[1]}: {first_bad[2]}" if first_bad else "",
    )
    return dtype


class _Headers(Collection[tuple[str, Any]]):
    """(path, header) of every file of `inputs` with a header, made as they are iterated (no
    list of every file: `resolve_signal_dtype` looks at each file's header once)."""

    def __init__(self, inputs: Sequence[InputFile]) -> None:
        self._inputs = inputs

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return ((f.path, f.info) for f in self._inputs if f.info is not None)

    def __len__(self) -> int:
        return sum(f.info is not None for f in self._inputs)

    def __contains__(self, item: object) -> bool:
        return any(item == header for header in self)


def check_output_dir(config: RecordConfig, output_dir: str, state: str) -> None:
    """Whether the run may write to `output_dir` in `state` (see `output_dir_state`).

    With ``--resume`` one of our directories is accepted (`pipelines.resume` decides what is
    reused).

    Raises:
      UsageError: it exists and ``--overwrite`` is not given, or it holds foreign files.
    """
    require(
        state in ("missing", "empty") or config.overwrite or (config.resume and state == "ours"),
        f"--output_dir {output_dir} exists; pass --overwrite to replace it"
        + (" (--resume continues only a run of ours)" if config.resume else ""),
    )
    require(
        state != "foreign",
        f"--output_dir {output_dir} holds files that are not an audiorecords dataset; "
        "refusing to overwrite it",
    )
