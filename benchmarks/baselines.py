"""What a user would write instead of audiorecords: the baselines of record_bench / replay_bench.

    python -m benchmarks tfdata --input_dir DIR --output_dir OUT
    python -m benchmarks seed     --input_dir DIR --output_dir OUT
    python -m benchmarks seed     --input_dir DIR --output_dir OUT --label_source dirname
    python -m benchmarks save     --input_dir DIR --output_dir OUT
    python -m benchmarks limit    --input_dir DIR
    python -m benchmarks tft_min

Same files and same features as ``python -m pipelines.record --win_len 16000 --features
log_mel``: windows of 16000 samples (hop 16000, partial windows dropped), log-mel with 64 bins,
400-sample frames, 160 hop, 512-point FFT, 20 Hz .. rate/2, log(mel + 1e-6) (the parameters of
transforms/audio/features.py); the signal kept as the file's sample values, int16 when every file
is 16-bit PCM, else int32 (the record job's ``--signal_dtype auto``); class = last
``_``-separated word of the file name (``--label_source dirname``: the files are
``DIR/<class>/*.wav`` and the class is the folder's name, as the record job's option of that name).

- ``tfdata`` (a): a plain tf.data script: read + decode (tf.audio.decode_wav; 24-bit files, which
  it cannot read, through tf.numpy_function + soundfile) + window + tf.signal log-mel, all with
  AUTOTUNE parallelism, then a Python loop building tf.train.Example (signal as raw bytes,
  log_mel as a float_list) and writing them with tf.io.TFRecordWriter (uncompressed, one file per
  ~128 MiB).
- ``seed``: the "seed-style" script of issue 18: the same dataset, every key of
  `SEED_KEYS` stored as ``tf.io.serialize_tensor`` bytes (signal, log_mel, class, target: the
  class's index in the sorted class list), uncompressed TFRecords written as in (a). Its
  equivalent of our ``log_mel_norm``: while writing it sums log_mel and its square, saves one
  mean and standard deviation (``meta.json``, the scalar z-score of ``tft.scale_to_z_score``)
  and `seed_replay` computes ``log_mel_norm`` from them at read time.
- ``save`` (b): the same dataset written with ``tf.data.Dataset.save(..., compression="GZIP")``.
- ``limit`` (c): the feature computation alone over all cores, no I/O: every window decoded into
  memory first (not timed), then our numpy path in one single-threaded process per core and
  tf.signal with all threads; prints the faster.
- ``tft_min``: the smallest tensorflow-transform job, what any tool that runs a TFT analysis pays
  at least. Two rows, as one Arrow RecordBatch through TFT's TFXIO input (as our record job feeds
  it): the analysis our job runs (``compute_and_apply_vocabulary`` of a class column,
  ``scale_to_z_score`` of a float feature), ``WriteTransformFn`` to a temporary directory, on
  Beam's FnApiRunner in this process (what our DirectRunner default runs; no Prism attempt). It
  ends as our job ends (atexit handlers, then ``os._exit``: `runners.internals.exit_now`), so
  that interpreter teardown, which the floor ``python -c "import tensorflow_transform.beam"``
  pays, is left out of both. Its wall time minus the floor's is TFT's fixed cost: tracing
  `preprocessing_fn`, writing the SavedModels, building and running the Beam graph of the
  analysis.

Each prints one JSON line: windows, seconds (the timed part), bytes written. `tfdata_replay` and
`seed_replay` are the replay halves of (a) and the seed-style script (batch 64, no shuffle).
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import os
import sys
import time

WIN = 16000
FRAME, STEP, FFT, BINS, LOWER, LOG_OFFSET = 400, 160, 512, 64, 20.0, 1e-6
FRAMES = 1 + (WIN - FRAME) // STEP  # 98 log-mel frames per window
BATCH = 64
SEED_KEYS = ("signal", "log_mel", "class", "target")
META = "meta.json"  # what the scripts' replay needs: signal dtype, classes, log_mel statistics
LABEL_SOURCES = ("filename", "dirname")  # class: last `_` word of the name / the parent folder


def _label(path: str, label_source: str = "filename") -> str:
    if label_source == "dirname":
        return os.path.basename(os.path.dirname(path))
    return os.path.splitext(os.path.basename(path))[0].rsplit("_", 1)[-1]


@functools.cache  # listed once a run: 10,240 clips' headers take ~1 s
def _files(input_dir: str, label_source: str = "filename") -> tuple[tuple[str, ...], ...]:
    """(16-bit PCM files, other files), sorted: DIR/*.wav, or DIR/*/*.wav for dirname labels."""
    import soundfile as sf

    pattern = ("*", "*.wav") if label_source == "dirname" else ("*.wav",)
    paths = sorted(glob.glob(os.path.join(input_dir, *pattern)))
    pcm16 = {p for p in paths if sf.info(p).subtype == "PCM_16"}
    return tuple(p for p in paths if p in pcm16), tuple(p for p in paths if p not in pcm16)


def signal_dtype(input_dir: str, label_source: str = "filename") -> str:
    """int16 when every file is 16-bit PCM, else int32 (the record job's auto choice here)."""
    return "int32" if _files(input_dir, label_source)[1] else "int16"


def tf_dataset(input_dir: str, label_source: str = "filename"):
    """tf.data.Dataset of per-window dicts: signal int16/32 [16000], log_mel [98, 64], class, ..."""
    import numpy as np
    import tensorflow as tf

    pcm16, other = _files(input_dir, label_source)
    dtype = tf.as_dtype(signal_dtype(input_dir, label_source))
    # class: the folder's name (dirname), else the last `_`-separated word of the file name
    class_of = (r"^.*/([^/]+)/[^/]*$", r"\1") if label_source == "dirname" else (r"^.*_|\.wav$", "")

    # linear_to_mel_weight_matrix needs a Python sample rate: one matrix per rate in the corpus.
    import soundfile as sf

    rates = sorted({sf.info(p).samplerate for p in pcm16 + other})
    mels = tf.stack(
        [tf.signal.linear_to_mel_weight_matrix(BINS, FFT // 2 + 1, r, LOWER, r / 2) for r in rates]
    )

    def log_mel(windows: tf.Tensor, rate: tf.Tensor) -> tf.Tensor:
        mel = mels[tf.argmax(tf.cast(tf.equal(rates, tf.cast(rate, tf.int32)), tf.int32))]
        stft = tf.signal.stft(windows, FRAME, STEP, FFT, window_fn=tf.signal.hann_window)
        return tf.math.log(tf.tensordot(tf.abs(stft), mel, 1) + LOG_OFFSET)

    def windows_of(path, samples, full_scale, rate):
        frames = tf.signal.frame(samples, WIN, WIN)  # [k, WIN] int32, partial window dropped
        k = tf.shape(frames)[0]
        feats = log_mel(tf.cast(frames, tf.float32) / full_scale, rate)
        return {
            "signal": tf.cast(frames, dtype),
            "log_mel": feats,
            "class": tf.fill([k], tf.strings.regex_replace(path, *class_of)),
            "filepath": tf.fill([k], path),
            "win_start_idx": tf.range(k, dtype=tf.int64) * WIN,
            "sample_rate": tf.fill([k], tf.cast(rate, tf.int64)),
        }

    def decode16(path):
        audio, rate = tf.audio.decode_wav(tf.io.read_file(path), desired_channels=1)
        samples = tf.cast(tf.round(audio[:, 0] * 32768.0), tf.int32)
        return windows_of(path, samples, 32768.0, rate)

    def read_other(path: bytes) -> tuple[np.ndarray, np.int32, np.float32]:
        import soundfile as sf

        data, rate = sf.read(path.decode(), dtype="int32", always_2d=True)
        bits = {"PCM_24": 24, "PCM_16": 16, "PCM_U8": 8}.get(sf.info(path.decode()).subtype, 32)
        return data[:, 0] >> (32 - bits), np.int32(rate), np.float32(2 ** (bits - 1))

    def decode_other(path):
        samples, rate, scale = tf.numpy_function(
            read_other, [path], (tf.int32, tf.int32, tf.float32), stateful=False
        )
        return windows_of(path, tf.ensure_shape(samples, [None]), scale, rate)

    parts = [
        tf.data.Dataset.from_tensor_slices(list(paths)).map(fn, num_parallel_calls=tf.data.AUTOTUNE)
        for paths, fn in ((pcm16, decode16), (other, decode_other))
        if paths
    ]
    ds = parts[0]
    for part in parts[1:]:
        ds = ds.concatenate(part)
    return ds.unbatch().prefetch(tf.data.AUTOTUNE)


def _write_records(records, output_dir: str, *, shard_bytes: int = 128 << 20) -> int:
    """Writes serialized records with TFRecordWriter, a new file every ~`shard_bytes`."""
    import tensorflow as tf

    os.makedirs(output_dir, exist_ok=True)
    count, written, shard, writer = 0, 0, 0, None
    for record in records:
        if writer is None or written >= shard_bytes * shard:
            if writer is not None:
                writer.close()
            writer = tf.io.TFRecordWriter(os.path.join(output_dir, f"data-{shard:05d}.tfrecord"))
            shard += 1
        writer.write(record)
        written += len(record)
        count += 1
    if writer is not None:
        writer.close()
    return count


def _write_meta(output_dir: str, **meta) -> None:
    with open(os.path.join(output_dir, META), "w") as fh:
        json.dump(meta, fh)


def run_tfrecord(input_dir: str, output_dir: str) -> dict:
    """(a) The familiar helper: iterate the dataset, build Examples in Python, TFRecordWriter."""
    import tensorflow as tf

    start = time.perf_counter()

    def examples():
        for e in tf_dataset(input_dir).as_numpy_iterator():
            feature = {
                "class": tf.train.Feature(bytes_list=tf.train.BytesList(value=[e["class"]])),
                "filepath": tf.train.Feature(bytes_list=tf.train.BytesList(value=[e["filepath"]])),
                "win_start_idx": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[e["win_start_idx"]])
                ),
                "sample_rate": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[e["sample_rate"]])
                ),
                "signal": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[e["signal"].tobytes()])
                ),
                "log_mel": tf.train.Feature(
                    float_list=tf.train.FloatList(value=e["log_mel"].reshape(-1))
                ),
            }
            yield tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

    count = _write_records(examples(), output_dir)
    _write_meta(output_dir, signal_dtype=signal_dtype(input_dir))
    return {"windows": count, "seconds": time.perf_counter() - start, "bytes": _du(output_dir)}


def run_seed(input_dir: str, output_dir: str, label_source: str = "filename") -> dict:
    """The seed-style script: serialize_tensor of every key, uncompressed TFRecords."""
    import numpy as np
    import tensorflow as tf

    start = time.perf_counter()
    pcm16, other = _files(input_dir, label_source)
    classes = sorted({_label(p, label_source) for p in pcm16 + other})

    def serialize(e):
        e = dict(e, target=tf.argmax(tf.cast(tf.equal(classes, e["class"]), tf.int64)))
        out = {k: tf.io.serialize_tensor(e[k]) for k in SEED_KEYS}
        x = tf.cast(e["log_mel"], tf.float64)  # for the z-score statistics
        return out, tf.stack([tf.reduce_sum(x), tf.reduce_sum(x * x)])

    ds = tf_dataset(input_dir, label_source).map(serialize, num_parallel_calls=tf.data.AUTOTUNE)
    sums = np.zeros(2)

    def examples():
        for values, moments in ds.as_numpy_iterator():
            sums[:] += moments
            feature = {
                k: tf.train.Feature(bytes_list=tf.train.BytesList(value=[values[k]]))
                for k in SEED_KEYS
            }
            yield tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

    count = _write_records(examples(), output_dir)
    n = count * FRAMES * BINS
    mean = sums[0] / n
    std = float(np.sqrt(max(sums[1] / n - mean * mean, 0.0)))
    meta = {"signal_dtype": signal_dtype(input_dir, label_source), "classes": classes}
    _write_meta(output_dir, **meta, mean=float(mean), std=std)
    return {"windows": count, "seconds": time.perf_counter() - start, "bytes": _du(output_dir)}


def _records(path: str):
    import tensorflow as tf

    files = sorted(glob.glob(os.path.join(path, "*.tfrecord")))
    return tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)


def seed_replay(path: str, keys=SEED_KEYS, *, batch_size: int = BATCH):
    """The seed-style script's reader: per record parse_single_example + parse_tensor, batch.

    ``log_mel_norm`` in `keys`: (log_mel - mean) / std with the statistics of ``meta.json``.
    """
    import tensorflow as tf

    with open(os.path.join(path, META)) as fh:
        meta = json.load(fh)
    dtypes = {"signal": meta["signal_dtype"], "log_mel": "float32", "class": "string"}
    dtypes["target"] = "int64"
    shapes = {"signal": [WIN], "log_mel": [FRAMES, BINS], "class": [], "target": []}
    stored = [k for k in SEED_KEYS if k in keys or (k == "log_mel" and "log_mel_norm" in keys)]
    spec = {k: tf.io.FixedLenFeature([], tf.string) for k in stored}

    def parse(record):
        raw = tf.io.parse_single_example(record, spec)
        out = {
            k: tf.ensure_shape(tf.io.parse_tensor(raw[k], tf.as_dtype(dtypes[k])), shapes[k])
            for k in stored
        }
        if "log_mel_norm" in keys:
            out["log_mel_norm"] = (out["log_mel"] - meta["mean"]) / meta["std"]
        return {k: out[k] for k in keys}

    ds = _records(path).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def tfdata_replay(path: str, *, batch_size: int = BATCH):
    """(a)'s reader: batch the records, one parse_example per batch, decode_raw the signal."""
    import tensorflow as tf

    with open(os.path.join(path, META)) as fh:
        dtype = tf.as_dtype(json.load(fh)["signal_dtype"])
    spec = {
        "class": tf.io.FixedLenFeature([], tf.string),
        "filepath": tf.io.FixedLenFeature([], tf.string),
        "win_start_idx": tf.io.FixedLenFeature([], tf.int64),
        "sample_rate": tf.io.FixedLenFeature([], tf.int64),
        "signal": tf.io.FixedLenFeature([], tf.string),
        "log_mel": tf.io.FixedLenFeature([FRAMES, BINS], tf.float32),
    }

    def parse(records):
        out = tf.io.parse_example(records, spec)
        out["signal"] = tf.reshape(tf.io.decode_raw(out["signal"], dtype), [-1, WIN])
        return out

    ds = _records(path).batch(batch_size).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def run_save(input_dir: str, output_dir: str) -> dict:
    """`tf.data.Dataset.save` with GZIP of the same dataset."""
    import tensorflow as tf

    start = time.perf_counter()
    ds = tf_dataset(input_dir)
    ds.save(output_dir, compression="GZIP")
    seconds = time.perf_counter() - start
    count = int(tf.data.Dataset.load(output_dir, compression="GZIP").cardinality())
    return {"windows": count, "seconds": seconds, "bytes": _du(output_dir)}


_WINDOWS: dict = {}


def _numpy_chunk(args: tuple[int, int, int]) -> int:
    from transforms.audio.features import FeatureConfig, compute_features_numpy

    rate, lo, hi = args
    x = _WINDOWS[rate][lo:hi]
    compute_features_numpy(x, sample_rate=rate, config=FeatureConfig(names=("log_mel",)))
    return hi - lo


def run_limit(input_dir: str, *, chunk: int = 256, repeats: int = 3) -> dict:
    """Best of `repeats` passes of the features alone: numpy x cores processes, or tf threads."""
    import multiprocessing as mp

    import numpy as np
    import soundfile as sf

    for path in sorted(glob.glob(os.path.join(input_dir, "*.wav"))):
        data, rate = sf.read(path, dtype="float32", always_2d=True)
        k = len(data) // WIN
        _WINDOWS.setdefault(rate, []).append(data[: k * WIN, 0].reshape(k, WIN))
    for rate in list(_WINDOWS):
        _WINDOWS[rate] = np.ascontiguousarray(np.concatenate(_WINDOWS[rate]))
    windows = sum(len(v) for v in _WINDOWS.values())
    tasks = [
        (rate, lo, min(lo + chunk, len(x)))
        for rate, x in _WINDOWS.items()
        for lo in range(0, len(x), chunk)
    ]
    cores = os.cpu_count() or 1
    env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    os.environ.update(env)  # for the forked workers' first numeric call
    ctx = mp.get_context("fork")
    best = {"numpy": float("inf"), "tf": float("inf")}
    with ctx.Pool(cores) as pool:
        pool.map(_numpy_chunk, tasks[: cores * 2])  # warm-up (imports, caches)
        from transforms.audio.features import FeatureConfig
        from transforms.audio.features_tf import compute_features_tf

        config = FeatureConfig(names=("log_mel",))
        for rate, x in _WINDOWS.items():
            compute_features_tf(x[:chunk], sample_rate=rate, config=config)
        for _ in range(repeats):
            start = time.perf_counter()
            assert sum(pool.map(_numpy_chunk, tasks, chunksize=1)) == windows
            best["numpy"] = min(best["numpy"], time.perf_counter() - start)
            start = time.perf_counter()
            for rate, x in _WINDOWS.items():
                for lo in range(0, len(x), 2048):
                    compute_features_tf(x[lo : lo + 2048], sample_rate=rate, config=config)
            best["tf"] = min(best["tf"], time.perf_counter() - start)
    path = min(best, key=best.get)
    return {
        "windows": windows,
        "seconds": best[path],
        "bytes": 0,
        "path": path,
        "numpy_windows_per_s": windows / best["numpy"],
        "tf_windows_per_s": windows / best["tf"],
    }


def _tft_preprocessing_fn(inputs: dict) -> dict:
    import tensorflow_transform as tft

    return {
        "target": tft.compute_and_apply_vocabulary(inputs["class"]),
        "x_norm": tft.scale_to_z_score(inputs["x"]),
    }


def run_tft_min() -> None:
    """Runs the smallest TFT job, prints its JSON line and ends as our job ends."""
    import tempfile

    import apache_beam as beam
    import pyarrow as pa
    import tensorflow_transform.beam as tft_beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx_bsl.tfxio.tensor_adapter import TensorAdapterConfig

    schema = pa.schema([("class", pa.list_(pa.binary())), ("x", pa.list_(pa.float32()))])
    batch = pa.record_batch(
        [pa.array([[b"a"], [b"b"]], schema.field("class").type),
         pa.array([[1, 2, 3, 4], [0, 0, 0, 1]], schema.field("x").type)],
        schema=schema,
    )  # fmt: skip
    reps = {"class": schema_pb2.TensorRepresentation(), "x": schema_pb2.TensorRepresentation()}
    reps["class"].dense_tensor.column_name = "class"
    reps["class"].dense_tensor.shape.SetInParent()
    reps["x"].dense_tensor.column_name = "x"
    reps["x"].dense_tensor.shape.dim.add().size = 4
    with tempfile.TemporaryDirectory() as tmp:
        with beam.Pipeline(runner=FnApiRunner()) as p:
            with tft_beam.Context(temp_dir=os.path.join(tmp, "tft")):
                rows = p | beam.Create([batch], reshuffle=False)
                transform_fn = (rows, TensorAdapterConfig(schema, reps)) | tft_beam.AnalyzeDataset(
                    _tft_preprocessing_fn
                )
                _ = transform_fn | tft_beam.WriteTransformFn(os.path.join(tmp, "out"))
        written = os.path.isdir(os.path.join(tmp, "out", "transform_fn"))
    print(json.dumps({"windows": 2, "bytes": 0, "seconds": None, "written": written}), flush=True)
    from runners.internals import exit_now  # our job's own ending

    exit_now(0 if written else 1)


def _du(path: str) -> int:
    total = 0
    for root, _, names in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, n)) for n in names)
    return total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("tfdata", "seed", "save", "limit", "tft_min"))
    parser.add_argument("--input_dir", help="the corpus (every mode but tft_min)")
    parser.add_argument("--output_dir", default=None)
    parser.add_argument(
        "--label_source",
        choices=LABEL_SOURCES,
        default="filename",
        help="seed only: class from the file name, or from the folder (files DIR/<class>/*.wav)",
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if args.mode == "tft_min":
        run_tft_min()
        return
    if not args.input_dir:
        parser.error(f"{args.mode} needs --input_dir")
    if args.mode == "tfdata":
        result = run_tfrecord(args.input_dir, args.output_dir)
    elif args.mode == "seed":
        result = run_seed(args.input_dir, args.output_dir, args.label_source)
    elif args.mode == "save":
        result = run_save(args.input_dir, args.output_dir)
    else:
        result = run_limit(args.input_dir)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
