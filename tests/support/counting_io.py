"""An in-memory file that counts what is read from it: tests bound a decoder's work in bytes.

Bytes read are a measure of work that does not depend on how busy the machine is, so the
fuzzers assert "never reads more than a small multiple of the input" instead of a time limit.
Holds no test itself.
"""

from __future__ import annotations

import io


class CountingBytesIO(io.BytesIO):
    """A real `io.BytesIO` that adds up the bytes every read returns (`bytes_read`)."""

    def __init__(self, data: bytes = b""):
        super().__init__(data)
        self.bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.bytes_read += len(data)
        return data

    def read1(self, size: int = -1) -> bytes:
        data = super().read1(size)
        self.bytes_read += len(data)
        return data

    def readinto(self, buffer) -> int:
        n = super().readinto(buffer)
        self.bytes_read += n
        return n
