"""Hand-shaped answer types the document has no schema for: a page of a list, a robot command's
outcome, and the keyword filters of the episode list."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, TypedDict, TypeVar

from .models import RobotCommandDeclined, RobotCommandResult

T = TypeVar("T")

Outcome = Literal["success", "failure", "discarded"]
SyncState = Literal["unverified", "synced", "verified"]
Scope = Literal["robots:read", "robots:command", "data:read", "data:write", "fleet:read", "admin"]
WebhookEvent = Literal["episode.finalized", "episode.synced", "episode.verified", "episode.failed", "episode.pruned"]
FilterValue = str | int | float | bool


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a keyset-paginated list: pass ``cursor`` back for the next (None on the last)."""

    items: list[T]
    cursor: str | None
    #: ``robots.list`` only: the page before this one (None on the first).
    prev_cursor: str | None = None
    request_id: str | None = None


@dataclass(frozen=True)
class CommandDecline:
    """Why the robot declined (``invalid_state``, ``invalid_args``, ``failed``, ``interrupted``,
    ``not_configured``, ``action_timeout``)."""

    code: str
    message: str


@dataclass(frozen=True)
class CommandResult:
    """A robot's answer to a command (HTTP 200): done (``ok``) or declined (``error``). A decline is
    an answer, not an exception; 503 and 504 are raised (RobotOfflineError, CommandTimeoutError)."""

    ok: bool
    command: str
    cmd_id: str
    robot_id: str
    error: CommandDecline | None
    #: Everything the robot answered, the command's own fields included (``episode_id``, ...).
    result: dict[str, Any] = field(default_factory=dict)
    #: The answer was replayed from the Idempotency-Key's stored response.
    replayed: bool = False

    @property
    def declined(self) -> bool:
        return not self.ok

    @classmethod
    def from_answer(cls, body: Any, replayed: bool) -> CommandResult:
        parsed = RobotCommandResult.model_validate(body)
        raw: dict[str, Any] = (
            parsed.result.model_dump(mode="json")
            if isinstance(parsed.result, RobotCommandDeclined)
            else dict(parsed.result)
        )
        declined = raw.get("ok") is False
        err = raw.get("error") if declined else None
        return cls(
            ok=not declined,
            command=str(raw.get("command", "")),
            cmd_id=str(raw.get("cmd_id", "")),
            robot_id=str(raw.get("robot_id", "")),
            error=CommandDecline(code=str(err.get("code")), message=str(err.get("message")))
            if isinstance(err, Mapping)
            else None,
            result=raw,
            replayed=replayed,
        )


class EpisodeFilters(TypedDict, total=False):
    """The filters of ``episodes.list``, ``iterate``, ``pages`` and ``export`` (all optional)."""

    robot_id: str
    task_id: str
    subtask_id: str
    operator_id: str
    control_mode: str
    policy_version_id: str
    eval_id: str
    outcome: Outcome
    #: Bounds on ``started_at`` (inclusive): a timezone-aware datetime or an ISO 8601 string.
    from_: datetime | str
    to: datetime | str
    sync_state: SyncState
    destination_id: str
    #: Equality on recorded metadata values (their string form): ``metadata={"site": "lab-2"}``.
    metadata: Mapping[str, FilterValue]
    #: Equality on annotation values (their string form): ``annotation={"qa": "approved"}``.
    annotation: Mapping[str, FilterValue]
    #: Whether a recorded metadata key is present (True) or absent (False), whatever its value.
    has_metadata: Mapping[str, bool]
    #: Whether an annotation key is present (True) or absent (False; a key deleted with None is
    #: absent): ``has_annotation={"qa_status": False}`` is every episode not yet reviewed.
    has_annotation: Mapping[str, bool]


_SCALARS = (
    "robot_id",
    "task_id",
    "subtask_id",
    "operator_id",
    "control_mode",
    "policy_version_id",
    "eval_id",
    "destination_id",
)
_OUTCOMES = ("success", "failure", "discarded")
_SYNC_STATES = ("unverified", "synced", "verified")


def episode_filter_pairs(filters: EpisodeFilters) -> list[tuple[str, FilterValue | datetime]]:
    """The query pairs of the filters, checked as the API would check them, before sending."""
    known = set(EpisodeFilters.__annotations__)
    unknown = sorted(set(filters) - known)
    if unknown:
        raise TypeError(f"unknown episode filter(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    pairs: list[tuple[str, FilterValue | datetime]] = []
    for name in _SCALARS:
        v = filters.get(name)
        if v is not None:
            if not isinstance(v, str) or len(v) > 512:
                raise ValueError(f"{name}: a string of at most 512 characters")
            pairs.append((name, v))
    outcome = filters.get("outcome")
    if outcome is not None:
        if outcome not in _OUTCOMES:
            raise ValueError(f"outcome: one of {', '.join(_OUTCOMES)}")
        pairs.append(("outcome", outcome))
    sync_state = filters.get("sync_state")
    if sync_state is not None:
        if sync_state not in _SYNC_STATES:
            raise ValueError(f"sync_state: one of {', '.join(_SYNC_STATES)}")
        pairs.append(("sync_state", sync_state))
    for name, key in (("from_", "from"), ("to", "to")):
        bound = filters.get(name)
        if bound is not None:
            if not isinstance(bound, (str, datetime)):
                raise ValueError(f"{name}: a datetime or an ISO 8601 string")
            pairs.append((key, bound))
    for family in ("metadata", "annotation"):
        values = filters.get(family)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise ValueError(f"{family}: a mapping of key to value")
        for k, v in values.items():
            if not isinstance(k, str) or k == "" or len(k) > 256:
                raise ValueError(f"{family}: keys are non-empty strings of at most 256 characters")
            if not isinstance(v, (str, int, float, bool)):
                raise ValueError(f"{family}[{k!r}]: a string, number or boolean (compared by its string form)")
            pairs.append((f"{family}.{k}", v))
    for family in ("has_metadata", "has_annotation"):
        presence = filters.get(family)
        if presence is None:
            continue
        if not isinstance(presence, Mapping):
            raise ValueError(f"{family}: a mapping of key to True (present) or False (absent)")
        for k, v in presence.items():
            if not isinstance(k, str) or k == "" or len(k) > 256:
                raise ValueError(f"{family}: keys are non-empty strings of at most 256 characters")
            if not isinstance(v, bool):
                raise ValueError(f"{family}[{k!r}]: True (the key is present) or False (it is absent)")
            pairs.append((f"{family}.{k}", v))
    return pairs


def filter_mapping(filters: EpisodeFilters) -> dict[str, str]:
    """The same filters as a dataset's ``filter`` object (string values, as the API stores them)."""
    from ._http import query_text

    return {k: query_text(v) for k, v in episode_filter_pairs(filters)}
