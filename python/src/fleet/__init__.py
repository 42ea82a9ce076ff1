"""fleet-client: the Python SDK of the robot fleet and episode data API (/v1).

    import fleet
    client = fleet.Fleet()            # FLEET_URL and FLEET_API_KEY from the environment
    for episode in client.episodes.iterate(task_id="pick", metadata={"site": "lab-2"}):
        ...

``Fleet`` is synchronous, ``AsyncFleet`` the same API for asyncio. Models (``fleet.models``)
are generated from the OpenAPI document; errors (``fleet.errors``) are one class per API code.
"""

from __future__ import annotations

from . import errors, events, models, webhooks
from ._async_client import AsyncFleet
from ._download import DownloadReport, FileRecord
from ._http import DEFAULT_COMMAND_RETRY, DEFAULT_RETRY, RetryPolicy
from ._sync_client import Fleet
from ._types import CommandDecline, CommandResult, EpisodeFilters, Page
from ._version import __version__
from .errors import (
    CommandTimeoutError,
    ConflictError,
    DownloadError,
    FleetApiError,
    FleetConnectionError,
    FleetError,
    IdempotencyKeyReusedError,
    MalformedApiKeyError,
    NotFoundError,
    RateLimitedError,
    RobotOfflineError,
    UnauthenticatedError,
    ValidationFailedError,
)

__all__ = [
    "DEFAULT_COMMAND_RETRY",
    "DEFAULT_RETRY",
    "AsyncFleet",
    "CommandDecline",
    "CommandResult",
    "CommandTimeoutError",
    "ConflictError",
    "DownloadError",
    "DownloadReport",
    "EpisodeFilters",
    "FileRecord",
    "Fleet",
    "FleetApiError",
    "FleetConnectionError",
    "FleetError",
    "IdempotencyKeyReusedError",
    "MalformedApiKeyError",
    "NotFoundError",
    "Page",
    "RateLimitedError",
    "RetryPolicy",
    "RobotOfflineError",
    "UnauthenticatedError",
    "ValidationFailedError",
    "__version__",
    "errors",
    "events",
    "models",
    "webhooks",
]
