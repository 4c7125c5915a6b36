"""Coverage-guided fuzzing (atheris) of the WAV decoder and the manifest loader: see README.md."""
