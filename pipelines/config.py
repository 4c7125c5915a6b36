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
import re
from collections.abc import Callable, Sequence
from typing import Any

from replay import format as fmt
from replay import storage
from replay.manifest import MAX_VALUES_PER_KEY
from transforms.audio import annotation_windows as aw
from transforms.audio import annotations as ann
from transforms.audio import dtypes, labels
from transforms.audio import features as feats
from transforms.audio.windows import WindowConfig
from transforms.spec.compression import COMPRESSIONS
from transforms.spec.sharding import SHARD_BY
from transforms.spec.types import CHANNEL_MODES

REQUIRED = ("input_pattern", "output_dir")  # the options without a default
APPEND_TRANSFORMS = fmt.APPEND_TRANSFORMS  # --append_transform
APPEND_CHANGED = ("refuse", "skip")  # --append_changed
_RULE = aw.LabelRule()  # the annotation rule's defaults
RECORD = "record"  # manifest: a field of every run's ``params``
ANNOTATION = "annotation"  # manifest: a field of ``params`` only for runs with --annotations
EVENT_WINDOWS = ("grid", "centered")  # --event_windows
TRAIN_SPLIT = "train"  # the split analysed by default when --splits is given
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class UsageError(ValueError):
    """Bad arguments or inputs: the run stops before any work, with this one-line message."""


@dataclasses.dataclass(frozen=True)
class AnnotationConfig:
    """The ``--annotations`` options.

    Attributes:
      pattern: glob of annotation tables.
      fmt: table format (`transforms.audio.annotations.FORMATS`).
      label_column: Raven label column (None: ``Annotation`` or the 8th column).
      rule: the window label rule.
      event_windows: ``grid`` (the usual windows) or ``centered`` (one per event).
      background_per_file: background windows per file with ``centered``.
      seed: seed of the background windows.
    """

    pattern: str
    fmt: str = "auto"
    label_column: str | None = None
    rule: aw.LabelRule = aw.LabelRule()
    event_windows: str = "grid"
    background_per_file: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.fmt not in ann.FORMATS:
            raise ValueError(f"--annotation_format must be one of {', '.join(ann.FORMATS)}")
        if self.event_windows not in EVENT_WINDOWS:
            raise ValueError(f"--event_windows must be one of {', '.join(EVENT_WINDOWS)}")
        if self.background_per_file < 0:
            raise ValueError("--background_per_file must be >= 0")
        if self.background_per_file and self.event_windows != "centered":
            raise ValueError("--background_per_file needs --event_windows centered")
        if self.background_per_file and self.rule.drop_background:
            raise ValueError("--background_per_file and --drop_background exclude each other")


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
        """Every check that needs no input file, in the order users have always seen them."""
        self._check_required_and_output()
        self._check_windows()
        self._check_encoding()
        self._check_sharding()
        self._check_features_and_labels()

    def _check_required_and_output(self) -> None:
        """The required options are set; --output_dir is on a file system TensorFlow writes."""
        missing = [f"--{n}" for n in REQUIRED if getattr(self, n) is None]
        require(not missing, f"the following arguments are required: {', '.join(missing)}")
        require(
            not (self.resume and self.overwrite),
            "--resume and --overwrite exclude each other: --resume keeps an unfinished run's "
            "work, --overwrite deletes it",
        )
        require(
            not (self.append and self.overwrite),
            "--append and --overwrite exclude each other: --append keeps the dataset and adds "
            "to it, --overwrite deletes it",
        )
        require(
            self.append_transform in APPEND_TRANSFORMS,
            f"--append_transform must be one of {', '.join(APPEND_TRANSFORMS)}",
        )
        require(
            self.append or self.append_transform == fmt.FROZEN_TRANSFORM,
            "--append_transform is for --append (a record run makes its transform)",
        )
        require(
            self.append_changed in APPEND_CHANGED,
            f"--append_changed must be one of {', '.join(APPEND_CHANGED)}",
        )
        require(
            self.append or self.append_changed == "refuse",
            "--append_changed is for --append",
        )
        output_scheme = storage.scheme(self.output_dir or "")
        require(
            output_scheme in storage.DATASET_SCHEMES,
            f"--output_dir {self.output_dir}: the dataset is written and replayed with "
            f"TensorFlow's file I/O, which has no {output_scheme}:// file system (it has gs:// "
            f"and local or mounted paths): write it there ({output_scheme}:// inputs are fine)",
        )

    def _check_windows(self) -> None:
        """--win_len, --hop_len, --max_windows_per_signal."""
        require(self.win_len > 0, f"--win_len must be > 0, got {self.win_len}")
        require(
            self.win_len <= MAX_VALUES_PER_KEY,
            f"--win_len {self.win_len} is over {MAX_VALUES_PER_KEY} (2^28) samples, the most "
            "the reader takes in one element",
        )
        hop = self.hop
        require(hop > 0, f"--hop_len must be > 0, got {hop}")
        require(
            hop <= self.win_len,
            f"--hop_len {hop} > --win_len {self.win_len} would skip samples between windows",
        )
        require(
            self.max_windows_per_signal is None or self.max_windows_per_signal > 0,
            f"--max_windows_per_signal must be > 0, got {self.max_windows_per_signal}",
        )

    def _check_encoding(self) -> None:
        """--channel_mode, the signal and feature dtypes, --compression, --sample_rate."""
        require(
            self.channel_mode in CHANNEL_MODES, f"--channel_mode must be one of {CHANNEL_MODES}"
        )
        require(
            self.signal_dtype in dtypes.SIGNAL_DTYPES,
            f"--signal_dtype must be one of {dtypes.SIGNAL_DTYPES}",
        )
        require(
            self.feature_dtype in fmt.FEATURE_DTYPES,
            f"--feature_dtype must be one of {fmt.FEATURE_DTYPES}",
        )
        require(
            self.compression_name in COMPRESSIONS, f"--compression must be one of {COMPRESSIONS}"
        )
        require(self.sample_rate is None or self.sample_rate > 0, "--sample_rate must be > 0")

    def _check_sharding(self) -> None:
        """--num_shards, --dataset_name (shard names), --elements_per_shard, --max_elements,
        --splits, --shard_by."""
        require(self.num_shards is None or self.num_shards > 0, "--num_shards must be > 0")
        name = self.dataset_name  # shard names derive from it: it must not leave --output_dir
        problem = fmt.plain_name_problem(name)  # the rule every reader applies to shard names
        require(
            problem is None,
            f"--dataset_name {name!r} must be a plain file name (no '/', '\\', leading '.' or "
            f"glob characters): it {problem}",
        )
        for flag in ("elements_per_shard", "max_elements"):
            value = getattr(self, flag)
            require(value is None or value > 0, f"--{flag} must be > 0, got {value}")
        require(
            self.elements_per_shard is None or self.num_shards is None,
            "--elements_per_shard and --num_shards exclude each other",
        )
        try:
            self.split_weights  # noqa: B018 - parses --splits
        except ValueError as e:
            raise UsageError(str(e)) from e
        require(
            self.shard_by in SHARD_BY,
            f"--shard_by must be one of {', '.join(SHARD_BY)}",
        )

    def _check_features_and_labels(self) -> None:
        """--features, --unknown_class, --label_source, --classes, --analyze_splits and the
        annotation options."""
        unknown = [n for n in self.feature_names if n not in feats.FEATURE_NAMES]
        require(
            not unknown,
            f"--features: unknown feature {', '.join(unknown)}; "
            f"choose from {', '.join(feats.FEATURE_NAMES)} or none",
        )
        require(
            self.unknown_class in labels.UNKNOWN_CLASS_MODES,
            f"--unknown_class must be one of {', '.join(labels.UNKNOWN_CLASS_MODES)}",
        )
        try:  # the rules that live with their types, which raise ValueError naming the option
            labels.parse_label_source(self.label_source)
            if self.classes is not None and not self.classes.startswith(labels.CLASSES_FILE_PREFIX):
                labels.parse_classes(self.classes, read_text=str)  # @FILE: read in planning
            self.analyzed_splits  # noqa: B018
            annotated = self.annotation_config
        except ValueError as e:
            raise UsageError(str(e)) from e
        require(
            annotated is None or self.shard_by != "class",
            "--shard_by class: not with --annotations",
        )


def require(condition: bool, message: str) -> None:
    if not condition:
        raise UsageError(message)


def parse_splits(value: str | None) -> tuple[tuple[str, float], ...]:
    """``train=80,validation=10,test=10`` -> (("train", .8), ...); None/"" -> ().

    Raises:
      ValueError: malformed, duplicate or reserved names, or non-positive weights.
    """
    if not value:
        return ()
    parts = []
    for item in value.split(","):
        name, sep, weight = item.partition("=")
        name = name.strip()
        if not sep or not _SPLIT_NAME.match(name) or name == fmt.ALL_SPLIT:
            raise ValueError(f"--splits: bad item {item!r}; expected name=weight, e.g. train=80")
        try:
            w = float(weight)
        except ValueError:
            raise ValueError(f"--splits: weight of {name!r} is not a number: {weight!r}") from None
        if not w > 0:
            raise ValueError(f"--splits: weight of {name!r} must be > 0")
        parts.append((name, w))
    names = [n for n, _ in parts]
    if len(set(names)) != len(names):
        raise ValueError(f"--splits: duplicate split names in {value!r}")
    total = sum(w for _, w in parts)
    return tuple((n, w / total) for n, w in parts)


def parse_analyze_splits(value: str | None, *, split_names: Sequence[str]) -> tuple[str, ...]:
    """The splits TFT's full pass (z-score statistics) sees, from ``--analyze_splits``.

    Without ``--splits`` (the single split "all") that is everything; with splits, the named
    ones, by default ``train``: statistics from held-out data would leak into training features.

    Raises:
      ValueError: an unknown or repeated name, the option without ``--splits``, or splits
        without a ``train`` split and no ``--analyze_splits``.
    """
    if tuple(split_names) == (fmt.ALL_SPLIT,):
        if value:
            raise ValueError("--analyze_splits needs --splits")
        return (fmt.ALL_SPLIT,)
    if not value:
        if TRAIN_SPLIT not in split_names:
            raise ValueError(
                f"--splits has no split named {TRAIN_SPLIT!r} to compute statistics on; "
                f"name the analysed splits with --analyze_splits (of {', '.join(split_names)})"
            )
        return (TRAIN_SPLIT,)
    names = [n.strip() for n in value.split(",")]
    for i, name in enumerate(names):
        if name not in split_names:
            raise ValueError(
                f"--analyze_splits: unknown split {name!r}; --splits has {', '.join(split_names)}"
            )
        if name in names[:i]:
            raise ValueError(f"--analyze_splits: split {name!r} is listed twice")
    return tuple(names)


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
