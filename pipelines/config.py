"""The record job's input: one frozen, typed `RecordConfig`, its options defined once.

Every record option is a field of `RecordConfig`; its metadata (help, parse type, choices,
manifest) is the only definition of the option. From it come:

- the command line: `pipelines.record` adds every field to an argparse parser (Beam's, through
  `RecordOptions`, or the ``--help`` parser), and `RecordConfig.from_namespace` builds the
  config from the parsed values;
- the Python API: ``record_dataset(win_len=16000, ...)`` builds ``RecordConfig(...)`` directly;
- the manifest's ``params`` (`RecordConfig.params`).

Construction validates every value (`RecordConfig.__post_init__`), before any I/O, and raises
`UsageError` with the one line the user sees. The options that parse into more than a value are
parsed here too: ``--splits`` (`parse_splits`), ``--analyze_splits`` (`parse_analyze_splits`)
and the ``--annotations`` options (`AnnotationConfig`). Checks that need the inputs (a dtype
that holds every file, feature sizes at the files' rate, ``--strict``) happen in planning
(`pipelines.plan`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pipelines import config_checks
from pipelines.config_checks import APPEND_CHANGED, APPEND_TRANSFORMS, REQUIRED
from pipelines.option_values import (
    EVENT_WINDOWS,
    TRAIN_SPLIT,
    AnnotationConfig,
    parse_analyze_splits,
    parse_splits,
)
from replay import format as fmt
from transforms.audio import annotation_windows as aw
from transforms.audio import annotations as ann
from transforms.audio import dtypes, labels
from transforms.audio import features as feats
from transforms.audio.windows import WindowConfig
from transforms.spec.sharding import SHARD_BY
from transforms.spec.types import CHANNEL_MODES

# re-exported: the option parsers and checks' constants moved to `pipelines.option_values` and
# `pipelines.config_checks`; their names stay importable from here
__all__ = [
    "APPEND_CHANGED",
    "APPEND_TRANSFORMS",
    "EVENT_WINDOWS",
    "OPTION_NAMES",
    "REQUIRED",
    "TRAIN_SPLIT",
    "AnnotationConfig",
    "RecordConfig",
    "UsageError",
    "parse_analyze_splits",
    "parse_splits",
    "require",
]
_RULE = aw.LabelRule()  # the annotation rule's defaults
RECORD = "record"  # manifest: a field of every run's ``params``
ANNOTATION = "annotation"  # manifest: a field of ``params`` only for runs with --annotations


class UsageError(ValueError):
    """Bad arguments or inputs: the run stops before any work, with this one-line message."""


def _option(
    default: Any,
    help: str,  # noqa: A002 - argparse's name
    *,
    parse: Callable[[str], Any] = str,
    flag: str | None = None,
    choices: tuple[str, ...] | None = None,
    manifest: str | None = RECORD,
) -> Any:
    """A `RecordConfig` field: `default` and what the command line and the manifest need."""
    meta = {"help": help, "parse": parse, "flag": flag, "choices": choices, "manifest": manifest}
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordConfig:
    """Every option of a record run (``--name`` on the command line, ``name=`` in Python).

    Comma lists (``features``, ``splits``, ``classes``, ``analyze_splits``) are stored as the
    command line's text; a list or tuple given in Python is joined with commas. None means the
    default. Numbers given as text are parsed as on the command line.

    Raises:
      UsageError: an invalid value (construction validates every field).
    """

    input_pattern: str = _option(dataclasses.MISSING, "glob of WAV files (local, gs://, s3://...)")
    output_dir: str = _option(dataclasses.MISSING, "dataset directory to write", manifest=None)
    win_len: int = _option(32768, "window length in samples", parse=int)
    hop_len: int | None = _option(None, "hop between windows (default win_len)", parse=int)
    pad: bool = _option(False, "zero-pad trailing partial windows", parse=bool)
    max_windows_per_signal: int | None = _option(None, "keep the first N windows", parse=int)
    label_source: str = _option("filename", "filename | dirname | csv:PATH")
    sample_rate: int | None = _option(None, "resample every file to this rate", parse=int)
    channel_mode: str = _option(
        "first",
        "multi-channel files: first channel, mean of channels, or split (one element per "
        "channel, with a `channel` key)",
        choices=CHANNEL_MODES,
    )
    signal_dtype: str = _option(
        "auto",
        "dtype of `signal`; auto = the narrowest that holds every file exactly",
        choices=dtypes.SIGNAL_DTYPES,
    )
    features: str = _option("log_mel", "comma list of spectrogram,log_mel,mfcc or none")
    feature_dtype: str = _option(
        "float32",
        "how features are stored, read back as float32: float16 (relative error <= 2^-11, "
        "values beyond +-65504 refused) or bfloat16 (<= 2^-8) halve them",
        choices=fmt.FEATURE_DTYPES,
    )
    frame_length: int = _option(400, "feature frame length (samples)", parse=int)
    frame_step: int = _option(160, "feature frame step (samples)", parse=int)
    fft_length: int = _option(512, "FFT length", parse=int)
    num_mel_bins: int = _option(64, "mel bands of log_mel / mfcc", parse=int)
    lower_edge_hz: float = _option(20.0, "lowest mel band edge (Hz)", parse=float)
    upper_edge_hz: float | None = _option(None, "highest edge (default rate/2)", parse=float)
    num_mfccs: int = _option(13, "MFCC coefficients kept", parse=int)
    normalize: bool = _option(
        True, "do not add TFT z-scored <feature>_norm keys", parse=bool, flag="--no_normalize"
    )
    compression: str = _option("AUTO", "AUTO | GZIP | ZLIB | NONE")
    num_shards: int | None = _option(None, "shard count (default: by size)", parse=int)
    dataset_name: str = _option(fmt.DEFAULT_NAME, "prefix of shard file names")
    overwrite: bool = _option(
        False, "replace an existing dataset directory", parse=bool, manifest=None
    )
    resume: bool = _option(
        False,
        "finish an unfinished run in --output_dir made from the same plan: its committed read "
        "tasks are not read again (a finished dataset is left untouched)",
        parse=bool,
        manifest=None,
    )
    append: bool = _option(
        False,
        "add the inputs a finished dataset in --output_dir does not hold yet as its next "
        "version, with its own options and transform (docs/growing.md)",
        parse=bool,
        manifest=None,
    )
    append_transform: str = _option(
        fmt.FROZEN_TRANSFORM,
        "with --append: frozen keeps the dataset's transform and statistics; refresh "
        "recomputes the z-score statistics of the union and adds a new transform graph",
        choices=APPEND_TRANSFORMS,
        manifest=None,
    )
    append_changed: str = _option(
        "refuse",
        "with --append: an input the dataset holds whose size or modification time changed: "
        "refuse the append naming it, or skip it (its recorded windows stay as they are)",
        choices=APPEND_CHANGED,
        manifest=None,
    )
    strict: bool = _option(False, "fail the job on the first bad input file", parse=bool)
    splits: str | None = _option(
        None, "e.g. train=80,validation=10,test=10: whole files per split by path hash"
    )
    shard_by: str = _option(
        "hash",
        "hash: spread windows; file: a file's windows in one shard; class: shard sets",
        choices=SHARD_BY,
    )
    analyze_splits: str | None = _option(
        None,
        "comma list of the splits TFT's statistics (<feature>_norm) are computed on "
        "(default: train when --splits is given)",
    )
    classes: str | None = _option(
        None,
        "fixed class list in target order: a,b,c or @FILE (one per line); default: every "
        "label, sorted by name",
    )
    unknown_class: str = _option(
        "error",
        "a label outside --classes: error (the file is listed in errors) or keep (target -1)",
        choices=labels.UNKNOWN_CLASS_MODES,
    )
    elements_per_shard: int | None = _option(
        None, "exactly N elements per shard (the last holds the rest), in file order", parse=int
    )
    max_elements: int | None = _option(
        None, "keep only the first N elements (in file order)", parse=int
    )
    # --annotations and its rule, windows, background (manifest params only with --annotations)
    annotations: str | None = _option(
        None, "glob of annotation tables (Raven, Audacity, CSV)", manifest=ANNOTATION
    )
    annotation_format: str = _option(
        "auto",
        "table format; auto: Raven by its header, CSV by .csv, else Audacity",
        choices=ann.FORMATS,
        manifest=ANNOTATION,
    )
    annotation_column: str | None = _option(
        None, "Raven label column (default Annotation)", manifest=ANNOTATION
    )
    min_label_overlap: float = _option(
        _RULE.min_overlap_s,
        "seconds of an event inside a window that label it",
        parse=float,
        manifest=ANNOTATION,
    )
    min_label_fraction: float = _option(
        _RULE.min_fraction,
        "... or this fraction of the event inside the window",
        parse=float,
        manifest=ANNOTATION,
    )
    background_class: str = _option(
        _RULE.background_class, "class of unlabelled windows", manifest=ANNOTATION
    )
    drop_background: bool = _option(
        False, "drop windows without a label", parse=bool, manifest=ANNOTATION
    )
    event_windows: str = _option(
        "grid",
        "grid: the usual windows; centered: one window centred on each event",
        choices=EVENT_WINDOWS,
        manifest=ANNOTATION,
    )
    background_per_file: int = _option(
        0,
        "with --event_windows centered: N windows per file away from every event",
        parse=int,
        manifest=ANNOTATION,
    )
    background_seed: int = _option(
        0, "seed of the background windows", parse=int, manifest=ANNOTATION
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            value = f.default if value is None and f.default is not dataclasses.MISSING else value
            object.__setattr__(self, f.name, _coerce(f, value))
        self._validate()

    @classmethod
    def from_namespace(cls, namespace: Any) -> RecordConfig:
        """The config of parsed command-line options (`RecordOptions` view or argparse result).

        Raises:
          UsageError: a required option is missing, or an invalid value.
        """
        missing = [f"--{n}" for n in REQUIRED if getattr(namespace, n, None) is None]
        if missing:
            raise UsageError(f"the following arguments are required: {', '.join(missing)}")
        return cls(**{f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls)})

    # Values derived from the options (validated at construction: these do not raise).
    @property
    def hop(self) -> int:
        """The hop between windows (``--hop_len``, default ``--win_len``)."""
        return self.win_len if self.hop_len is None else self.hop_len

    @property
    def feature_names(self) -> tuple[str, ...]:
        """``--features`` as names, in output order (``none`` -> ())."""
        names = tuple(n.strip() for n in self.features.split(",") if n.strip())
        return () if names == ("none",) else names

    @property
    def compression_name(self) -> str:
        return self.compression.upper()

    @property
    def split_weights(self) -> tuple[tuple[str, float], ...]:
        """``--splits`` as ((name, weight), ...); () without splits."""
        return parse_splits(self.splits)

    @property
    def analyzed_splits(self) -> tuple[str, ...]:
        """The splits TFT's statistics are computed on."""
        names = tuple(n for n, _ in self.split_weights) or (fmt.ALL_SPLIT,)
        return parse_analyze_splits(self.analyze_splits, split_names=names)

    @property
    def window(self) -> WindowConfig:
        return WindowConfig(
            win_len=self.win_len,
            hop_len=self.hop,
            pad=self.pad,
            max_windows=self.max_windows_per_signal,
        )

    @property
    def feature_config(self) -> feats.FeatureConfig:
        return feats.FeatureConfig(
            names=self.feature_names,
            frame_length=self.frame_length,
            frame_step=self.frame_step,
            fft_length=self.fft_length,
            num_mel_bins=self.num_mel_bins,
            lower_edge_hz=self.lower_edge_hz,
            upper_edge_hz=self.upper_edge_hz,
            num_mfccs=self.num_mfccs,
        )

    @property
    def annotation_config(self) -> AnnotationConfig | None:
        """The ``--annotations`` job (None without the option)."""
        if not self.annotations:
            return None
        rule = aw.LabelRule(
            min_overlap_s=self.min_label_overlap,
            min_fraction=self.min_label_fraction,
            background_class=self.background_class,
            drop_background=self.drop_background,
        )
        return AnnotationConfig(
            pattern=self.annotations,
            fmt=self.annotation_format,
            label_column=self.annotation_column,
            rule=rule,
            event_windows=self.event_windows,
            background_per_file=self.background_per_file,
            seed=self.background_seed,
        )

    def params(self) -> dict[str, Any]:
        """The manifest's ``params``: the run's options by name, sorted (JSON values).

        ``hop_len`` is the hop used and ``features`` the list of names; the annotation options
        appear only in an annotated run (a run without them keeps its manifest bytes).
        """
        kinds = (RECORD, ANNOTATION) if self.annotations else (RECORD,)
        values = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.metadata["manifest"] in kinds
        }
        values.update(hop_len=self.hop, features=list(self.feature_names))
        return dict(sorted(values.items()))

    def _validate(self) -> None:
        """Every check that needs no input file (`pipelines.config_checks.validate`), its
        `ValueError` raised as the user's one-line `UsageError`."""
        try:
            config_checks.validate(self)
        except UsageError:
            raise
        except ValueError as e:
            raise UsageError(str(e)) from e


def require(condition: bool, message: str) -> None:
    if not condition:
        raise UsageError(message)


def _coerce(f: dataclasses.Field, value: Any) -> Any:
    """A field's value as the command line would give it (lists joined, text parsed)."""
    parse = f.metadata["parse"]
    if value is None or value is dataclasses.MISSING:
        return value
    if parse is bool:
        return bool(value)
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    if parse is str:
        return value if isinstance(value, str) else str(value)
    if type(value) is parse:
        return value
    try:
        return parse(str(value))  # what argparse does with the text: 20 -> "20" -> 20.0
    except ValueError:
        raise UsageError(
            f"argument --{f.name}: invalid {parse.__name__} value: {value!r}"
        ) from None


OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(RecordConfig))
