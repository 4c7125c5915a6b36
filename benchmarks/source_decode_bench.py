"""Decoding a window without TensorFlow: `replay.source`'s wire-format parser against protobuf.

    python -m benchmarks source_decode [--dataset DIR] [--records 1024] [--repeats 5]

Reads `--records` records of the dataset (`replay.open_records`, default: the 10,240 clips of
`replay_clips_bench.py`, 57 KB windows) into memory, then times, per record and all keys:

- ``hand``: `replay.source.decode_example` (the source's parser);
- ``upb``: ``tf.train.Example``'s protobuf classes built at run time from a small descriptor in
  a private pool (protobuf's upb backend, no TensorFlow import), then the same numpy decoding;
- ``tf``: ``tf.io.parse_example`` of the whole batch (`replay.parsing.batch_parser`), its
  tensors converted to numpy (with `--tf`; imports TensorFlow).

Prints the median microseconds a record of each (the three run in turn), and checks that
``upb`` and ``hand`` give equal elements; ``--compare N`` compares the first N elements of
`replay.open_source` with `replay_dataset`'s (the largest ulp distance of each float key).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from benchmarks import options
from benchmarks.table import table
from replay import format as fmt
from replay import load_info, open_records, open_source
from replay.source import Decoder, decode_example, z_score

CLIPS = "/tmp/audiorecords-bench/work/replay-clips-10240/ours"


def example_class() -> type:
    """``tensorflow.Example`` as a protobuf class of a private pool, from feature.proto's and
    example.proto's fields (no TensorFlow import)."""
    f = descriptor_pb2.FileDescriptorProto(
        name="bench_example.proto", package="bench", syntax="proto3"
    )
    T = descriptor_pb2.FieldDescriptorProto
    rep, opt = T.LABEL_REPEATED, T.LABEL_OPTIONAL

    def message(name, *fields):
        m = f.message_type.add(name=name)
        for fname, number, label, ftype, type_name, oneof in fields:
            field = m.field.add(name=fname, number=number, label=label, type=ftype)
            if type_name:
                field.type_name = type_name
            if oneof is not None:
                field.oneof_index = oneof
        return m

    message("BytesList", ("value", 1, rep, T.TYPE_BYTES, "", None))
    message("FloatList", ("value", 1, rep, T.TYPE_FLOAT, "", None)).field[0].options.packed = True
    message("Int64List", ("value", 1, rep, T.TYPE_INT64, "", None)).field[0].options.packed = True
    feature = message(
        "Feature",
        ("bytes_list", 1, opt, T.TYPE_MESSAGE, ".bench.BytesList", 0),
        ("float_list", 2, opt, T.TYPE_MESSAGE, ".bench.FloatList", 0),
        ("int64_list", 3, opt, T.TYPE_MESSAGE, ".bench.Int64List", 0),
    )
    feature.oneof_decl.add(name="kind")
    entry_type = ".bench.Features.FeatureEntry"
    features = message("Features", ("feature", 1, rep, T.TYPE_MESSAGE, entry_type, None))
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=opt, type=T.TYPE_STRING)
    entry.field.add(
        name="value", number=2, label=opt, type=T.TYPE_MESSAGE, type_name=".bench.Feature"
    )
    message("Example", ("features", 1, opt, T.TYPE_MESSAGE, ".bench.Features", None))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Example"))


def upb_decoder(specs, elements):
    """The element of a record parsed by the protobuf class (`example_class`)."""
    Example = example_class()
    stored = Decoder(specs, elements).stored

    def decode(data: bytes) -> dict:
        feature = Example.FromString(data).features.feature
        decoded = {}
        for key, spec in stored.items():
            f = feature[key]
            if spec.encoding == fmt.ENCODING_RAW:
                stored_dtype = spec.stored_dtype or spec.dtype
                v = np.frombuffer(f.bytes_list.value[0], np.dtype(stored_dtype).newbyteorder("<"))
                decoded[key] = v.astype(spec.dtype).reshape(spec.shape)
            elif spec.encoding == fmt.ENCODING_BYTES_LIST:
                decoded[key] = np.array(f.bytes_list.value[0], dtype=object)
            else:
                kind = f.int64_list if spec.encoding == fmt.ENCODING_INT64_LIST else f.float_list
                values = np.asarray(kind.value, np.int64 if kind is f.int64_list else np.float32)
                decoded[key] = values.astype(spec.dtype).reshape(spec.shape)
        out = {}
        for key, spec in specs.items():
            z = spec.z_score
            if z is None:
                out[key] = decoded[key]
            else:
                out[key] = z_score(decoded[z.source], mean=z.mean, var=z.var)
        return out

    return decode


def _interleaved(fns: dict, records: list, repeats: int) -> dict[str, float]:
    """{name: median microseconds a record} of each function over `records`, the functions
    run in turn `repeats` times (so a change in the host's load touches each alike)."""
    runs = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn(records)
            runs[name].append((time.perf_counter() - t) / len(records) * 1e6)
    return {name: statistics.median(v) for name, v in runs.items()}


def _ulps(a: np.ndarray, b: np.ndarray) -> int:
    """The largest distance in float32 units in the last place between `a` and `b`."""
    ia = a.astype(np.float32).view(np.int32).astype(np.int64)
    ib = b.astype(np.float32).view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(2**31) - ia, ia)  # ordered: negative floats below positive
    ib = np.where(ib < 0, -(2**31) - ib, ib)
    return int(np.abs(ia - ib).max()) if ia.size else 0


def compare_with_tf(path: str, count: int) -> None:
    """The first `count` elements of `open_source` against `replay_dataset`'s (recorded
    order): stored keys bit for bit, the largest ulp distance of each float key."""
    from replay import replay_dataset

    source = open_source(path)
    ds = replay_dataset(path, cycle_length=1).take(count)
    worst: dict[str, int] = {}
    for i, theirs in enumerate(ds.as_numpy_iterator()):
        ours = source[i]
        for key, value in theirs.items():
            if ours[key].dtype == np.float32:
                worst[key] = max(worst.get(key, 0), _ulps(ours[key], np.asarray(value)))
            else:
                assert np.array_equal(ours[key], np.asarray(value, dtype=ours[key].dtype)), key
    print(f"{count} elements against replay_dataset: max ulp distance {worst}, others equal")


def main(argv: list[str] | None = None) -> None:
    parser = options.common(options.parser(__doc__), repeats=7, work_dir=False, json=False)
    parser.add_argument("--dataset", default=CLIPS)
    parser.add_argument("--records", type=int, default=1024)
    parser.add_argument("--tf", action="store_true")
    parser.add_argument("--compare", type=int, default=0, help="elements to compare with tf")
    args = parser.parse_args(argv)
    info = load_info(args.dataset)
    records = open_records(args.dataset)
    data = records.__getitems__(np.arange(min(args.records, len(records))))
    print(f"{len(data)} records, {np.mean([len(d) for d in data]) / 1e3:.1f} KB each")
    cells = []
    for features in (None, ["signal", "target"]):
        specs = info.select_features(features)
        decoder = Decoder(specs, info.elements)
        upb = upb_decoder(specs, info.elements)
        a, b = decode_example(data[0], decoder), upb(data[0])
        assert all(np.array_equal(a[k], b[k]) for k in a), "upb and hand disagree"
        fns = {
            "hand": lambda rs, d=decoder: [decode_example(r, d) for r in rs],
            "upb": lambda rs, u=upb: [u(r) for r in rs],
        }
        if args.tf:
            import tensorflow as tf

            from replay.parsing import batch_parser

            parse = batch_parser(specs, info.elements)
            fns["tf.io.parse_example (one batch)"] = lambda rs, p=parse: {
                k: v.numpy() for k, v in p(tf.constant(rs)).items()
            }
        times = _interleaved(fns, data, args.repeats)
        cells += [(", ".join(features or ["all"]), k, f"{v:.1f}") for k, v in times.items()]
    print(table(("keys", "decoder", "us a record"), cells, align="llr"))
    if args.compare:
        compare_with_tf(args.dataset, args.compare)


if __name__ == "__main__":
    main()
