"""audiorecords: WAV files -> sharded TFRecords with Apache Beam, replayed with tf.data.

`setup.py` at the root (as in Beam's juliaset example) so `--setup_file ./setup.py` ships our
packages to Dataflow / portable workers.
"""

import setuptools

setuptools.setup(
    name="audiorecords",
    version="0.1.0",
    description="Turn a pile of WAV files into training data once; replay it fast with tf.data.",
    # fuzz/ is a development tool (atheris scripts), not part of what users install
    packages=setuptools.find_packages(
        exclude=("tests", "tests.*", "benchmarks", "benchmarks.*", "fuzz", "fuzz.*")
    ),
    python_requires=">=3.10",
    install_requires=[
        "apache-beam[aws]>=2.60",  # [aws]: boto3 for s3:// inputs
        "tensorflow>=2.15",
        "tensorflow-transform>=1.15",
        "tfx-bsl>=1.15",
        "tensorflow-metadata>=1.15",
        "soundfile>=0.12",
        "scipy>=1.11",
        "numpy>=1.26",
        "threadpoolctl>=3.5",  # 3.5: numpy 2.x wheels' scipy-openblas
        "google-crc32c>=1.5",
        "crc32c>=2.4",  # replay.records: hardware CRC-32C of every record read by number
    ],
    # replay._frames: a batch of local TFRecord frames read and CRC-checked outside the GIL
    # (replay/records.py); optional: where it cannot be built, records.py reads in Python
    ext_modules=[
        setuptools.Extension(
            "replay._frames", ["replay/_frames.c"], extra_compile_args=["-O2"], optional=True
        )
    ],
    extras_require={
        "report": ["matplotlib>=3.7"],
        "gcs": ["google-cloud-storage>=2"],
        # replay.samplers: the global order for PyTorch's and Grain's loaders
        "torch": ["torch>=2.4"],
        "grain": ["grain>=0.2.18"],
    },
)
