"""Seals: HMAC-SHA256 under a private key in the state home, for files whose content feeds
evidence (the A/B champion cache, the seed rollout cache).

A digest says a file did not change since it was recorded; a seal says Ingot wrote it. An entry
edited by hand (to make a worse challenger look better) no longer verifies and is recomputed,
never trusted. The key (`seal.key`, 32 random bytes, 0600) is created on first use. Ground floor:
imports nothing of the project. Like the audit key, it does not stop someone who can read it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_BYTES = 32


class Seal:
    def __init__(self, key_path: Path) -> None:
        self.key_path = key_path
        self._key: bytes | None = None

    def _load(self) -> bytes:
        if self._key is None:
            self.key_path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                key = self.key_path.read_bytes()
            else:
                key = secrets.token_bytes(KEY_BYTES)
                try:
                    os.write(fd, key)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            if len(key) != KEY_BYTES:
                raise ValueError(
                    f"{self.key_path} is damaged ({len(key)} bytes); delete it to start a new one"
                )
            self._key = key
        return self._key

    def sign(self, data: bytes) -> str:
        return hmac.new(self._load(), data, hashlib.sha256).hexdigest()

    def verifies(self, data: bytes, mac: object) -> bool:
        return isinstance(mac, str) and hmac.compare_digest(mac, self.sign(data))
