"""Publishing TFT's transform graph into the dataset: ``transform_fn/`` and
``transformed_metadata/``, copied object by object.

tensorflow-transform's own `tft_beam.WriteTransformFn` renames two temporary directories into
place. On GCS a directory rename is TensorFlow's `GcsFileSystem::RenameFile`: it first asks
whether the source is a directory and treats *any* failure of that question, a transient 503
included, as "it is a file", renames the directory as one object, gets 404 Not Found, which is
not retried, and the job fails in its last stage (found by test_reads_gcs.py's injected
faults). Copying each file is made of requests TensorFlow's retrying file system retries one by
one, and a copy can be repeated, so a retried bundle starts over safely.

The written trees are TFT's (the same files, `tft.TFTransformOutput` reads them); the metadata
goes first to a unique directory under ``.tmp/`` (TFT's `WriteMetadata`), the saved model is
copied from where `Analyze` left it (also under ``.tmp/``). The dataset is unreadable until its
manifest is written (Finalize), so publishing need not be atomic, only complete.
"""

from __future__ import annotations

import apache_beam as beam
import tensorflow_transform as tft
from tensorflow_transform.beam import tft_beam_io
from tensorflow_transform.beam.tft_beam_io import beam_metadata_io

TFT_METADATA_DIR = ".tft_metadata"  # TFT's impl_helper.METADATA_DIR_NAME: not published


def copy_tree(source: str, target: str) -> int:
    """Replaces `target` with a copy of the directory `source` as TFT's `_copy_tree` makes it
    (files and directories, same names, no `TFT_METADATA_DIR`), file by file; returns the
    number of files copied."""
    import tensorflow as tf

    if tf.io.gfile.exists(target):
        tf.io.gfile.rmtree(target)
    return _copy(tf.io.gfile, source.rstrip("/"), target.rstrip("/"))


def _copy(gfile, source: str, target: str) -> int:
    if not gfile.isdir(source):
        gfile.copy(source, target, overwrite=True)
        return 1
    if source.rsplit("/", 1)[-1] == TFT_METADATA_DIR:
        return 0
    gfile.makedirs(target)
    names = sorted(name.rstrip("/") for name in gfile.listdir(source))
    return sum(_copy(gfile, f"{source}/{name}", f"{target}/{name}") for name in names)


class WriteTransformFn(beam.PTransform):
    """`tft_beam.WriteTransformFn(output_dir)` published by `copy_tree`: (saved model path,
    metadata) -> one element once ``transform_fn/`` and ``transformed_metadata/`` are in
    place."""

    def __init__(self, output_dir: str) -> None:
        super().__init__()
        self._output_dir = output_dir.rstrip("/")

    def _extract_input_pvalues(self, transform_fn):
        # as TFT's WriteTransformFn: the metadata is a PCollection only when it is deferred
        saved_model_dir, metadata = transform_fn
        pvalues = [saved_model_dir]
        if isinstance(metadata, beam_metadata_io.BeamDatasetMetadata):
            pvalues.append(metadata.deferred_metadata)
        return transform_fn, pvalues

    def expand(self, transform_fn):
        saved_model_dir, metadata = transform_fn
        pipeline = saved_model_dir.pipeline
        temp_metadata = metadata | "WriteMetadataToTemp" >> tft_beam_io.WriteMetadata(
            f"{self._output_dir}/.tmp/transformed_metadata",
            pipeline,
            write_to_unique_subdirectory=True,
        )
        out = self._output_dir

        def publish(_: None, metadata_dir: str, model_dir: str) -> None:
            copy_tree(metadata_dir, f"{out}/{tft.TFTransformOutput.TRANSFORMED_METADATA_DIR}")
            copy_tree(model_dir, f"{out}/{tft.TFTransformOutput.TRANSFORM_FN_DIR}")

        return (
            pipeline
            | "CreateSole" >> beam.Create([None])
            | "Publish"
            >> beam.Map(
                publish,
                metadata_dir=beam.pvalue.AsSingleton(temp_metadata),
                model_dir=beam.pvalue.AsSingleton(saved_model_dir),
            )
        )
