"""The element specs of the on-disk format (`replay.format`, the contract between record and
replay): which keys a decoded element has, how each is stored in the records and what it
decodes to; importable from `replay.format` too.

Each record is a serialized `tf.train.Example`. Keys, dtypes and shapes of the decoded element
are in `manifest["elements"]` (an `ElementSpec` per key). Encodings:

- ``encoding == "raw"``: one bytes value holding the little-endian tensor bytes, row-major: the
  ``signal`` key (int16 / int32 / float32 / float64 samples, bit-exact) and, from format version
  2, every float tensor (features, ``labels``). ``stored_dtype`` (float16 / bfloat16, optional)
  is the dtype of the bytes when it differs from the decoded ``dtype`` (float32): compact storage
  of features (``--feature_dtype``), widened back to float32 when read.
- ``encoding == "float_list"`` / ``"int64_list"``: the flattened tensor, row-major (format
  version 1 stores float tensors as float_list).
- ``encoding == "bytes_list"``: one bytes value (strings, e.g. ``class``, ``filepath``).
- ``encoding == "z_score"`` (version 2): not stored. The reader computes the key from the stored
  key ``source`` with the analysis statistics ``mean`` and ``var`` (float32 values, exact in
  JSON) and tensorflow-transform's ``scale_to_z_score`` ops, bit for bit what version 1 stored
  (`z_score`). Version 1 stores ``<feature>_norm`` as a float_list copy.

`stored_encoding` is the one rule the writer follows: strings bytes_list, int64 int64_list,
every other dtype raw.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

ENCODING_RAW = "raw"
ENCODING_FLOAT_LIST = "float_list"
ENCODING_INT64_LIST = "int64_list"
ENCODING_BYTES_LIST = "bytes_list"
ENCODING_Z_SCORE = "z_score"  # version 2: computed by the reader, not stored
ENCODINGS = (
    ENCODING_RAW,
    ENCODING_FLOAT_LIST,
    ENCODING_INT64_LIST,
    ENCODING_BYTES_LIST,
    ENCODING_Z_SCORE,
)
DTYPES = ("int16", "int32", "int64", "float32", "float64", "string")  # float64: signal only
# --feature_dtype: how float32 features are stored (raw), always read back as float32. float16:
# relative error <= 2**-11 for |x| in [2**-14, 65504], larger values refused; bfloat16: float32's
# range, relative error <= 2**-8.
FEATURE_DTYPES = ("float32", "float16", "bfloat16")
STORED_DTYPES = ("float16", "bfloat16")  # raw bytes narrower than the decoded float32
_ENCODINGS, _DTYPES = ENCODINGS, DTYPES


@dataclasses.dataclass(frozen=True)
class ZScore:
    """A key computed at read time: ``scale_to_z_score(<source>)`` with the analysis statistics.

    Attributes:
      source: the stored key it is computed from.
      mean: tensorflow-transform's mean of `source` over the analysed splits (a float32 value).
      var: its (biased) variance (a float32 value, >= 0).
    """

    source: str
    mean: float
    var: float


@dataclasses.dataclass(frozen=True)
class ElementSpec:
    """How one key of an element is stored and what it decodes to.

    Attributes:
      dtype: decoded dtype name: int16, int32, int64, float32, float64 or string.
      shape: decoded shape ([] for scalars).
      encoding: one of raw, float_list, int64_list, bytes_list, z_score (module docstring).
      stored_dtype: raw only: float16 or bfloat16 when the bytes are narrower than `dtype`.
      z_score: z_score only: what the key is computed from.
    """

    dtype: str
    shape: tuple[int, ...]
    encoding: str
    stored_dtype: str | None = None
    z_score: ZScore | None = None

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {_DTYPES}")
        if self.encoding not in _ENCODINGS:
            raise ValueError(f"unknown encoding {self.encoding!r}; expected one of {_ENCODINGS}")
        if self.stored_dtype is not None and (
            self.stored_dtype not in STORED_DTYPES
            or self.encoding != ENCODING_RAW
            or self.dtype != "float32"
        ):
            raise ValueError(f"stored_dtype {self.stored_dtype!r}: only float16/bfloat16 raw")
        if (self.z_score is None) != (self.encoding != ENCODING_Z_SCORE):
            raise ValueError("a z_score key needs its source and statistics, others have none")

    @property
    def stored(self) -> bool:
        """Whether the records hold this key (z_score keys are computed when read)."""
        return self.encoding != ENCODING_Z_SCORE

    def to_json(self) -> dict[str, Any]:
        obj = {"dtype": self.dtype, "shape": list(self.shape), "encoding": self.encoding}
        if self.stored_dtype is not None:
            obj["stored_dtype"] = self.stored_dtype
        if self.z_score is not None:
            obj.update(source=self.z_score.source, mean=self.z_score.mean, var=self.z_score.var)
        return obj

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ElementSpec:
        z_score = None
        if obj["encoding"] == ENCODING_Z_SCORE:
            z_score = ZScore(source=obj["source"], mean=obj["mean"], var=obj["var"])
        return cls(
            dtype=obj["dtype"],
            shape=tuple(obj["shape"]),
            encoding=obj["encoding"],
            stored_dtype=obj.get("stored_dtype"),
            z_score=z_score,
        )


def stored_encoding(dtype: str) -> str:
    """The encoding the writer uses for a key of decoded `dtype` (format version 2).

    Strings: bytes_list; int64 (ids, counts, offsets): int64_list; every other dtype (signal
    samples, float tensors): raw little-endian bytes, which parse faster than float_list
    (docs/performance.md) and keep samples bit-exact.
    """
    if dtype == "string":
        return ENCODING_BYTES_LIST
    if dtype == "int64":
        return ENCODING_INT64_LIST
    return ENCODING_RAW


def stored_spec(dtype: str, shape: Sequence[int], *, stored_dtype: str = "") -> ElementSpec:
    """The `ElementSpec` of a stored key by `stored_encoding`; `stored_dtype` (float16 /
    bfloat16) narrows a float32 key's bytes (``float32`` or empty: none)."""
    narrow = stored_dtype if stored_dtype and stored_dtype != dtype else None
    return ElementSpec(dtype, tuple(shape), stored_encoding(dtype), stored_dtype=narrow)


def z_score_spec(source: str, spec: ElementSpec, *, mean: float, var: float) -> ElementSpec:
    """The spec of ``<source>_norm``, computed by the reader from the stored key `source`."""
    z_score = ZScore(source=source, mean=float(mean), var=float(var))
    return ElementSpec(spec.dtype, spec.shape, ENCODING_Z_SCORE, z_score=z_score)


def element_specs(manifest: Mapping[str, Any]) -> dict[str, ElementSpec]:
    """The `ElementSpec` of every key of a decoded element, in manifest order."""
    return {key: ElementSpec.from_json(obj) for key, obj in manifest["elements"].items()}


def stored_specs(
    specs: Mapping[str, ElementSpec], elements: Mapping[str, ElementSpec] | None = None
) -> dict[str, ElementSpec]:
    """The stored keys to parse for `specs`: the stored ones, and each z_score key's source
    (looked up in `elements`, every key of the dataset; default `specs`)."""
    elements = specs if elements is None else elements
    stored = {}
    for key, spec in specs.items():
        if spec.z_score is not None:
            source = spec.z_score.source
            if source not in elements or not elements[source].stored:
                raise ValueError(f"{key}: source key {source!r} is not a stored key")
            stored[source] = elements[source]
        else:
            stored[key] = spec
    return stored
