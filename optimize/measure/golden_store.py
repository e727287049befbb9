"""Where goldens live on disk: `<home>/goldens/<skill>/`, private (0700 folders, 0600 files).

A golden is stored under its SHA-256 (content-addressed, never rewritten), its review beside it
(`.review.json`, rewritten as criteria are approved or the golden retired), and the serving
revision's files once per revision under `revisions/`. Reading re-checks the digest: a golden
edited on disk is refused (`GoldenError`), never replayed. What a golden is, is goldens.py's.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ingot.fsutil import check_relative, write_atomic
from optimize.measure.goldens import (
    REVISION,
    SCHEMA_VERSION,
    SKILL_NAME,
    Criterion,
    Golden,
    GoldenError,
    Review,
    Stored,
    WorldFact,
)


def _review_from(data: Mapping[str, Any]) -> Review:
    if data.get("schema_version") != SCHEMA_VERSION:
        raise GoldenError("not a version-1 golden review")
    return Review(
        criteria=tuple(Criterion(str(c["id"]), str(c["text"])) for c in data.get("criteria") or ()),
        facts=tuple(
            WorldFact(
                str(f["id"]),
                int(f["step"]),
                str(f["tool"]),
                str(f["label"]),
                str(f["value"]),
                tuple(str(q) for q in f.get("quotes") or ()),  # absent in reviews written before quotes
            )
            for f in data.get("facts") or ()
        ),
        status=data.get("status", "none"),
        drafted_by=data.get("drafted_by"),
        approved_by=data.get("approved_by"),
        approved_at=data.get("approved_at"),
        state=data.get("state", "active"),
        retired_by=data.get("retired_by"),
        retired_at=data.get("retired_at"),
        retired_reason=data.get("retired_reason"),
        notes=tuple(data.get("notes") or ()),
    )


def _golden_from(data: Mapping[str, Any]) -> Golden:
    if data.get("schema_version") != SCHEMA_VERSION:
        raise GoldenError("not a version-1 golden")
    if not SKILL_NAME.match(str(data["skill"])) or not REVISION.match(str(data["revision"])):
        raise GoldenError("its skill or revision is malformed")
    return Golden(
        skill=str(data["skill"]),
        revision=str(data["revision"]),
        route=str(data["route"]),
        harness=data.get("harness"),
        model=data.get("model"),
        task=str(data["task"]),
        answer=str(data["answer"]),
        messages=tuple(data["messages"]),
        tools=tuple(data.get("tools") or ()),
        model_calls=tuple(data.get("model_calls") or ()),
        source=dict(data.get("source") or {}),
    )


class GoldenStore:
    """`<home>/goldens/<skill>/<digest>.json` (+ `.review.json`) and `revisions/<revision>.json`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _skill_dir(self, skill: str) -> Path:
        check_relative(skill)
        return self.folder / skill

    def _write(self, path: Path, data: Mapping[str, Any]) -> None:
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        folder = self.folder
        for part in ("", *path.parent.relative_to(self.folder).parts):  # every level private
            folder = folder / part if part else folder
            folder.mkdir(mode=0o700, exist_ok=True)
            folder.chmod(0o700)
        write_atomic(
            path, json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False).encode(), mode=0o600
        )

    def add(self, golden: Golden, files: Mapping[str, bytes], review: Review) -> tuple[Stored, bool]:
        """Store `golden`, its revision's files and `review`; (stored, False) if it was already there."""
        folder = self._skill_dir(golden.skill)
        path = folder / f"{golden.digest}.json"
        if path.exists():
            return self.load(path), False
        revision_path = folder / "revisions" / f"{golden.revision}.json"
        if not revision_path.exists():
            encoded = [{"path": p, "base64": base64.b64encode(d).decode()} for p, d in sorted(files.items())]
            self._write(revision_path, {"schema_version": SCHEMA_VERSION, "files": encoded})
        self._write(path.with_suffix(".review.json"), review.to_json())
        self._write(path, golden.content())
        return Stored(golden, review, path), True

    def load(self, path: Path) -> Stored:
        try:
            golden = _golden_from(json.loads(path.read_bytes()))
            review = _review_from(json.loads(path.with_suffix(".review.json").read_bytes()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise GoldenError(f"cannot read golden {path.name}: {exc}") from exc
        if golden.digest != path.stem:
            raise GoldenError(f"golden {path.name} does not hash to its name (edited on disk); retire it")
        return Stored(golden, review, path)

    def all(self, skill: str | None = None) -> tuple[list[Stored], list[str]]:
        """Every golden (of `skill`), oldest first, and one line per file that could not be read."""
        found, problems = [], []
        folders = (
            [self._skill_dir(skill)] if skill else sorted(p for p in self.folder.glob("*") if p.is_dir())
        )
        for folder in folders:
            for path in sorted(folder.glob("*.json")):
                if path.name.endswith(".review.json"):
                    continue
                try:
                    found.append(self.load(path))
                except GoldenError as exc:
                    problems.append(str(exc))
        found.sort(key=lambda s: str(s.golden.source.get("time", "")))
        return found, problems

    def active(self, skill: str) -> tuple[list[Stored], list[str]]:
        stored, problems = self.all(skill)
        return [s for s in stored if s.review.state == "active"], problems

    def find(self, golden_id: str) -> Stored:
        """The golden whose id (or digest) starts with `golden_id`."""
        prefix = golden_id.removeprefix("g-")
        matches = [s for s in self.all()[0] if len(prefix) >= 6 and s.golden.digest.startswith(prefix)]
        if len(matches) != 1:
            raise GoldenError(f"{golden_id!r} matches {len(matches)} goldens; `ingot goldens` lists them")
        return matches[0]

    def save_review(self, stored: Stored, review: Review) -> Stored:
        self._write(stored.path.with_suffix(".review.json"), review.to_json())
        return replace(stored, review=review)

    def revision_files(self, skill: str, revision: str) -> dict[str, bytes]:
        if not REVISION.match(revision):
            raise GoldenError(f"{revision[:20]!r} is not a revision")
        path = self._skill_dir(skill) / "revisions" / f"{revision}.json"
        try:
            data = json.loads(path.read_bytes())
            return {check_relative(f["path"]): base64.b64decode(f["base64"]) for f in data["files"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise GoldenError(
                f"the files of {skill}@{revision[:12]} are missing from the goldens store: {exc}"
            ) from exc

    def skills(self) -> Iterator[str]:
        yield from sorted(p.name for p in self.folder.glob("*") if p.is_dir())
