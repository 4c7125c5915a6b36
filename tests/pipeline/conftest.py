"""Fixtures shared by the pipeline tests."""

from __future__ import annotations

import pytest

from tests.support.s3_server import running_s3_server


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on 127.0.0.1 (`tests.support.s3_server`), one per test module."""
    with running_s3_server() as server:
        yield server
