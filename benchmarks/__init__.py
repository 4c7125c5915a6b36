"""Measurements of audiorecords against its peers: ``python -m benchmarks`` (README.md)."""
