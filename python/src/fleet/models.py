# Generated from cloud/openapi.json by python/scripts/generate_models.py (npm run sdk:models): do not edit.

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AnyUrl,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
)
from typing_extensions import TypeAliasType


class CreateApiKeyRequestInput(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    name: Annotated[
        str,
        Field(
            max_length=128,
            min_length=1,
            pattern='^[^\\u0000]*[^\\u0000\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff][^\\u0000]*$',
        ),
    ]
    scopes: Annotated[
        list[
            Literal[
                'robots:read',
                'robots:command',
                'data:read',
                'data:write',
                'fleet:read',
                'admin',
            ]
        ],
        Field(min_length=1),
    ]
    expires_at: AwareDatetime | None = None


class CreateEnrollmentTokenRequestInput(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    name_prefix: Annotated[
        str | None, Field(max_length=64, min_length=1, pattern='^[A-Za-z0-9 ._-]+$')
    ] = None
    max_uses: Annotated[int | None, Field(ge=1, le=100000)] = None
    expires_at: AwareDatetime | None = None


class EnrollRequestInput(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    token: Annotated[str, Field(max_length=256, min_length=1)]
    name: Annotated[
        str | None,
        Field(
            max_length=128,
            min_length=1,
            pattern='^[^\\u0000]*[^\\u0000\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff][^\\u0000]*$',
        ),
    ] = None
    platform: Annotated[str | None, Field(max_length=128, min_length=1)] = None
    runtime_version: Annotated[str | None, Field(max_length=64, min_length=1)] = None


class PatchAnnotationsRequestInput(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    annotations: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=256)], Any
    ]
    """
    Shallow-merged into the annotations layer; a null value deletes that key.
    """


class PatchOutcomeRequestInput(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    outcome: Literal['success', 'failure', 'discarded']
    reason: Annotated[
        str,
        Field(
            max_length=1024,
            min_length=1,
            pattern='^[^\\u0000]*[^\\u0000\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff][^\\u0000]*$',
        ),
    ]


Description = TypeAliasType(
    "Description",
    Annotated[
        str,
        Field(
            max_length=4096,
            min_length=1,
            pattern='^[^\\u0000]*[^\\u0000\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff][^\\u0000]*$',
        ),
    ],
)


class Filter(BaseModel):
    """
    Episode list filter keys (metadata.<key>, annotation.<key>, has_metadata.<key> and has_annotation.<key> included); values are stored as strings.
    """

    model_config = ConfigDict(
        extra='allow',
    )
    robot_id: Annotated[str, StringConstraints(min_length=1, max_length=512)] | float | bool | None = None
    task_id: Annotated[str, StringConstraints(min_length=1, max_length=512)] | float | bool | None = None
    subtask_id: Annotated[str, StringConstraints(min_length=1, max_length=512)] | float | bool | None = None
    operator_id: Annotated[str, StringConstraints(min_length=1, max_length=512)] | float | bool | None = None
    control_mode: Annotated[str, StringConstraints(min_length=1, max_length=512)] | float | bool | None = None
    policy_version_id: Annotated[str, StringConstraints(min_length=1, max_length=512)] | float | bool | None = None
    eval_id: Annotated[str, StringConstraints(min_length=1, max_length=512)] | float | bool | None = None
    destination_id: Annotated[str, StringConstraints(min_length=1, max_length=512)] | float | bool | None = None
    outcome: Literal['success', 'failure', 'discarded'] | None = None
    from_: Annotated[AwareDatetime | None, Field(alias='from')] = None
    to: Annotated[str, StringConstraints(min_length=1, max_length=512)] | float | bool | None = None
    """
    a date-time, or with sync_state a destination id
    """
    sync_state: Literal['unverified', 'synced', 'verified'] | None = None


class CreateDatasetRequestInput(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    name: Annotated[
        str,
        Field(
            max_length=128,
            min_length=1,
            pattern='^[^\\u0000]*[^\\u0000\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff][^\\u0000]*$',
        ),
    ]
    description: Description | None = None
    filter: Filter
    """
    Episode list filter keys (metadata.<key>, annotation.<key>, has_metadata.<key> and has_annotation.<key> included); values are stored as strings.
    """


class CreateWebhookRequestInput(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    url: AnyUrl
    """
    HTTPS; must resolve to public addresses; redirects are not followed
    """
    events: Annotated[
        list[
            Literal[
                'episode.finalized',
                'episode.synced',
                'episode.verified',
                'episode.failed',
                'episode.pruned',
            ]
        ],
        Field(min_length=1),
    ]


class CreateDestinationRequestInput(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    type: Literal['external']
    """
    Only `external` (a grant provider) is offered
    """
    url: AnyUrl
    """
    The grant provider: HTTPS, must resolve to public addresses; redirects are not followed
    """
    retention: Literal['keep', 'until_all_verified_plus_72h'] | None = None
    """
    What the robot does with its local copy once verified; default `keep`
    """


RobotId = TypeAliasType("RobotId", Annotated[str, Field(max_length=256, min_length=1)])


RobotId1Item = TypeAliasType(
    "RobotId1Item", Annotated[str, Field(max_length=256, min_length=1)]
)


RobotId1 = TypeAliasType(
    "RobotId1", Annotated[list[RobotId1Item], Field(max_length=100, min_length=1)]
)


TaskId = TypeAliasType("TaskId", Annotated[str, Field(max_length=256, min_length=1)])


TaskId1Item = TypeAliasType(
    "TaskId1Item", Annotated[str, Field(max_length=256, min_length=1)]
)


TaskId1 = TypeAliasType(
    "TaskId1", Annotated[list[TaskId1Item], Field(max_length=100, min_length=1)]
)


RecordingSessionId = TypeAliasType(
    "RecordingSessionId", Annotated[str, Field(max_length=256, min_length=1)]
)


RecordingSessionId1Item = TypeAliasType(
    "RecordingSessionId1Item", Annotated[str, Field(max_length=256, min_length=1)]
)


RecordingSessionId1 = TypeAliasType(
    "RecordingSessionId1",
    Annotated[list[RecordingSessionId1Item], Field(max_length=100, min_length=1)],
)


EpisodeSeq = TypeAliasType(
    "EpisodeSeq", Annotated[str, Field(pattern='^[1-9][0-9]{0,14}$')]
)


EpisodeSeq1Item = TypeAliasType(
    "EpisodeSeq1Item", Annotated[str, Field(pattern='^[1-9][0-9]{0,14}$')]
)


EpisodeSeq1 = TypeAliasType(
    "EpisodeSeq1", Annotated[list[EpisodeSeq1Item], Field(max_length=100, min_length=1)]
)


EpisodeId = TypeAliasType(
    "EpisodeId", Annotated[str, Field(max_length=256, min_length=1)]
)


EpisodeId1Item = TypeAliasType(
    "EpisodeId1Item", Annotated[str, Field(max_length=256, min_length=1)]
)


EpisodeId1 = TypeAliasType(
    "EpisodeId1", Annotated[list[EpisodeId1Item], Field(max_length=100, min_length=1)]
)


Outcome = TypeAliasType(
    "Outcome",
    Annotated[
        list[Literal['success', 'failure', 'discarded']],
        Field(max_length=100, min_length=1),
    ],
)


RobotPlatform = TypeAliasType(
    "RobotPlatform", Annotated[str, Field(max_length=256, min_length=1)]
)


RobotPlatform1Item = TypeAliasType(
    "RobotPlatform1Item", Annotated[str, Field(max_length=256, min_length=1)]
)


RobotPlatform1 = TypeAliasType(
    "RobotPlatform1",
    Annotated[list[RobotPlatform1Item], Field(max_length=100, min_length=1)],
)


HasAutonomous = TypeAliasType(
    "HasAutonomous",
    Annotated[list[Literal['true', 'false']], Field(max_length=100, min_length=1)],
)


class RoutingMatchInput(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    robot_id: RobotId | RobotId1 | None = None
    task_id: TaskId | TaskId1 | None = None
    recording_session_id: RecordingSessionId | RecordingSessionId1 | None = None
    episode_seq: EpisodeSeq | EpisodeSeq1 | None = None
    episode_id: EpisodeId | EpisodeId1 | None = None
    outcome: Literal['success', 'failure', 'discarded'] | Outcome | None = None
    robot_platform: RobotPlatform | RobotPlatform1 | None = None
    has_autonomous: Literal['true', 'false'] | HasAutonomous | None = None


class CreateRoutingRuleRequestInput(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    destination_id: Annotated[str, Field(max_length=128, min_length=1)]
    match: RoutingMatchInput


RuleId = TypeAliasType("RuleId", Annotated[str, Field(max_length=128, min_length=1)])


class SetRoutingRuleOrderRequestInput(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    rule_ids: Annotated[list[RuleId], Field(max_length=100)]
    """
    Every rule of the organization, each once, in the new order
    """


File = TypeAliasType("File", Annotated[str, Field(max_length=1024, min_length=1)])


class ReadLinksRequestInput(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    destination_id: Annotated[str | None, Field(max_length=128, min_length=1)] = None
    files: Annotated[list[File] | None, Field(max_length=64, min_length=1)] = None


class Error1(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    code: str
    message: str
    details: dict[str, Any] | None = None
    request_id: str | None = None
    """
    The X-Request-Id of the request (always sent by this service); quote it when asking for support
    """


class Error(BaseModel):
    """
    Every error response has this body.
    """

    model_config = ConfigDict(
        extra='allow',
    )
    error: Error1


class ApiKey(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    name: str
    scopes: list[
        Literal[
            'robots:read',
            'robots:command',
            'data:read',
            'data:write',
            'fleet:read',
            'admin',
        ]
    ]
    created_by: str
    last_used_at: str | None
    expires_at: str | None
    revoked_at: str | None
    created_at: str


class CreatedApiKey(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    name: str
    scopes: list[
        Literal[
            'robots:read',
            'robots:command',
            'data:read',
            'data:write',
            'fleet:read',
            'admin',
        ]
    ]
    created_by: str
    last_used_at: str | None
    expires_at: str | None
    revoked_at: str | None
    created_at: str
    key: str
    """
    The plaintext key. Returned exactly once; store it now.
    """


class Key(BaseModel):
    """
    The key that asked: what it may do (its scopes), so a client can show only the actions it can take
    """

    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    name: str
    scopes: list[str]
    expires_at: str | None


class Entitlements(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    tier: str
    features: dict[str, bool]
    limits: dict[str, float]
    key: Key
    """
    The key that asked: what it may do (its scopes), so a client can show only the actions it can take
    """


class UsageItem(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    meter: str
    day: str
    count: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]


class Usage(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    usage: list[UsageItem]


class EnrollmentToken(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    token: str
    """
    `ret_…`; shown once
    """
    name_prefix: str | None
    max_uses: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    uses: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    expires_at: str
    created_at: str


class EnrollmentTokenInfo(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    token_prefix: str
    """
    the first characters of the `ret_…` token, to tell tokens apart; never the whole token
    """
    name_prefix: str | None
    max_uses: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    uses: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    expires_at: str
    created_at: str
    revoked_at: str | None


class Mqtt(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    url: str
    """
    broker address as the cloud knows it; a robot may be told another (the first of `urls`)
    """
    urls: Annotated[list[str], Field(min_length=1)]
    """
    every broker address the robot may use, in the order to try them: the nodes of a clustered broker, starting at one picked for this robot; one address otherwise
    """
    client_id: str
    username: str
    password: str
    """
    shown once
    """
    topic_prefix: str


class EnrollResponse(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    robot_id: str
    name: str
    mqtt: Mqtt


class Credentials(BaseModel):
    """
    the state of the robot's broker credentials; never the secret
    """

    model_config = ConfigDict(
        extra='allow',
    )
    rotation: Literal['none', 'pending']
    """
    `pending`: a rotation was asked for and the robot has not yet acknowledged its new secret (its old one still works)
    """
    rotation_requested_at: str | None
    rotated_at: str | None
    """
    when the robot last acknowledged a new secret
    """


class Robot(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    name: str
    platform: str | None
    runtime_version: str | None
    capabilities: list[str]
    connected: bool
    recording_state: Literal['idle', 'recording', 'finalizing'] | None
    last_seen_at: str | None
    created_at: str
    deenrolled_at: str | None
    """
    set by DELETE /v1/robots/{id}: the robot can no longer connect or take commands; its episodes stay
    """
    credentials: Credentials
    """
    the state of the robot's broker credentials; never the secret
    """


class Error2(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    code: Literal[
        'invalid_state',
        'invalid_args',
        'failed',
        'interrupted',
        'not_configured',
        'action_timeout',
    ]
    message: str


class RobotCommandDeclined(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    ok: Literal[False]
    error: Error2
    cmd_id: str
    command: Literal[
        'go_home',
        'go_to_start',
        'start_autonomous',
        'stop_autonomous',
        'stack.start',
        'stack.stop',
        'stack.status',
        'episodes.start',
        'episodes.finish',
        'episodes.fail',
        'episodes.discard',
        'credentials.rotate',
    ]
    robot_id: str


class CredentialRotation(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    robot_id: str
    state: Literal['completed', 'pending']
    """
    `completed`: the robot stored its new secret and the old one is refused; `pending`: it happens when the robot next connects (or acknowledges)
    """
    requested_at: str
    rotated_at: str | None


class RobotCommandResult(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    status: Literal['ok']
    result: RobotCommandDeclined | dict[str, Any]


SubtaskId = TypeAliasType("SubtaskId", Annotated[str, Field(max_length=1024)])


SubtaskName = TypeAliasType("SubtaskName", Annotated[str, Field(max_length=1024)])


class Segment(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    segment_index: Annotated[int, Field(ge=0, le=9007199254740991)]
    subtask_id: SubtaskId | None
    subtask_name: SubtaskName | None
    start_offset_s: Annotated[float, Field(ge=0.0)]
    end_offset_s: Annotated[float, Field(ge=0.0)]


class Replica(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    destination_id: str
    state: Literal['granted', 'syncing', 'synced', 'verified']
    grant_id: str
    error: str | None
    updated_at: str
    object_key: str | None = None


class Episode(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    robot_id: str
    recording_session_id: str
    episode_seq: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    session_name: str | None
    task_id: str | None
    task_name: str | None
    subtask_id: str | None
    operator_id: str | None
    operator_name: str | None
    outcome: Literal['success', 'failure', 'discarded']
    recorded_outcome: Literal['success', 'failure', 'discarded'] | None
    control_mode: str | None
    policy_version_id: str | None
    eval_id: str | None
    started_at: str
    ended_at: str | None
    duration_s: float | None
    message_count: float | None
    bag_size_bytes: float | None
    bag_uri: str | None
    metadata: dict[str, Any] | None
    annotations: dict[str, Any] | None
    reported_at: str
    replicas: list[Replica]


class File1(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    path: str
    size_bytes: float
    sha256: str


class Location(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    destination_id: str
    state: str
    object_key: str | None
    grant_id: str


class EpisodeWithLocations(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    robot_id: str
    recording_session_id: str
    episode_seq: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    session_name: str | None
    task_id: str | None
    task_name: str | None
    subtask_id: str | None
    operator_id: str | None
    operator_name: str | None
    outcome: Literal['success', 'failure', 'discarded']
    recorded_outcome: Literal['success', 'failure', 'discarded'] | None
    control_mode: str | None
    policy_version_id: str | None
    eval_id: str | None
    started_at: str
    ended_at: str | None
    duration_s: float | None
    message_count: float | None
    bag_size_bytes: float | None
    bag_uri: str | None
    metadata: dict[str, Any] | None
    annotations: dict[str, Any] | None
    reported_at: str
    replicas: list[Replica]
    files: list[File1]
    locations: list[Location]


class EpisodeFiles(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    files: list[File1]
    total_bytes: float


class OutcomeChange(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    actor: str
    at: str
    from_: Annotated[Literal['success', 'failure', 'discarded'], Field(alias='from')]
    to: Literal['success', 'failure', 'discarded']
    reason: str


EpisodeCount = TypeAliasType(
    "EpisodeCount", Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
)


class Dataset(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    name: str
    description: str | None
    filter: dict[str, str]
    snapshot_at: str | None
    episode_count: EpisodeCount | None
    created_by: str
    created_at: str


class DatasetSnapshot(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    snapshot_at: str
    episode_count: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]


class DatasetCount(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    dataset_id: str
    live: bool
    episode_count: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    capped: bool
    """
    true when counting stopped at the cap: there are more than `episode_count`
    """


class ManifestHeader(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    dataset_id: str
    name: str
    filter: dict[str, str]
    snapshot_at: str
    episode_count: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]


class Webhook(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    url: str
    events: list[str]
    status: Literal['active', 'disabled']
    disabled_reason: str | None
    pending_deliveries: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    last_delivered_at: str | None
    last_delivery_error: str | None
    created_at: str


class CreatedWebhook(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    url: str
    events: list[str]
    status: Literal['active', 'disabled']
    disabled_reason: str | None
    pending_deliveries: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    last_delivered_at: str | None
    last_delivery_error: str | None
    created_at: str
    secret: str
    """
    `whsec_…`; shown once
    """


LastStatus = TypeAliasType(
    "LastStatus", Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
)


class DeadLetter(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    event_id: str
    event: str
    payload: dict[str, Any]
    attempts: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    last_status: LastStatus | None
    last_error: str | None
    dead_lettered_at: str


StatusCode = TypeAliasType(
    "StatusCode", Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
)
"""
the receiver's HTTP status; null when no answer came
"""


LatencyMs = TypeAliasType(
    "LatencyMs", Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
)
"""
from sending the request to the receiver's answer or the failure
"""


class DeliveryAttempt(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    event_id: str
    event: str
    attempt: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    """
    1 for the first attempt of this delivery, 2 for its first retry, …
    """
    status_code: StatusCode | None
    """
    the receiver's HTTP status; null when no answer came
    """
    error: str | None
    """
    why the attempt failed (a status or a network error); null on success
    """
    latency_ms: LatencyMs | None
    """
    from sending the request to the receiver's answer or the failure
    """
    outcome: Literal['delivered', 'retry', 'dead']
    """
    what the attempt led to
    """
    at: str


class Error3(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    code: Annotated[str, Field(max_length=64, min_length=1)]
    message: Annotated[str, Field(max_length=1024)]


class WebhookPayload(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    schema_version: Literal[1]
    episode_id: Annotated[str, Field(min_length=1)]
    robot_id: Annotated[str, Field(min_length=1)]
    recording_session_id: Annotated[str, Field(min_length=1)]
    episode_seq: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    destination_id: Annotated[str | None, Field(min_length=1)] = None
    grant_id: Annotated[str | None, Field(min_length=1)] = None
    object_key: Annotated[str | None, Field(min_length=1)] = None
    state: Annotated[str, Field(min_length=1)]
    error: Error3 | None = None
    test: Literal[True] | None = None


class RobotStatusEvent(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    schema_version: Literal[1]
    robot_id: Annotated[str, Field(min_length=1)]
    online: bool
    recording_state: Literal['idle', 'recording', 'finalizing'] | None
    last_seen_at: str | None


class LastDeferral(BaseModel):
    """
    The newest deferral of the last 24 hours, with why
    """

    model_config = ConfigDict(
        extra='allow',
    )
    at: str
    reason: str
    """
    `reason: message`, e.g. `schema_invalid: the grant omits 1 manifest file(s)`
    """


class Destination(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    type: Literal['external']
    url: str
    retention: Literal['keep', 'until_all_verified_plus_72h']
    created_at: str
    revoked_at: str | None
    last_forward_at: str | None
    """
    The newest grant request forwarded to the provider
    """
    forwards_24h: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    """
    Grant requests forwarded in the last 24 hours (granted or deferred)
    """
    deferrals_24h: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    """
    Of those, the ones that did not produce a grant
    """
    last_deferral: LastDeferral | None
    """
    The newest deferral of the last 24 hours, with why
    """


class CreatedDestination(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    type: Literal['external']
    url: str
    retention: Literal['keep', 'until_all_verified_plus_72h']
    created_at: str
    revoked_at: str | None
    last_forward_at: str | None
    """
    The newest grant request forwarded to the provider
    """
    forwards_24h: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    """
    Grant requests forwarded in the last 24 hours (granted or deferred)
    """
    deferrals_24h: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    """
    Of those, the ones that did not produce a grant
    """
    last_deferral: LastDeferral | None
    """
    The newest deferral of the last 24 hours, with why
    """
    secret: str
    """
    `dsec_…`: signs the grant requests sent to the provider; shown once
    """


class RoutingRule(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    id: str
    destination_id: str
    match: dict[str, list[str]]
    """
    Each field with the values it accepts (a single string is shown as a one-element array)
    """
    position: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    """
    1-based; the first matching rule wins
    """
    created_at: str


class Pressure(BaseModel):
    """
    The disk pressure the robot last reported; absent until it reports one
    """

    model_config = ConfigDict(
        extra='allow',
    )
    free_bytes: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    backlog_bytes: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    hours_to_full: float | None
    reported_at: str


class SyncHealthRow(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    robot_id: str
    episodes_reported: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    """
    Episodes the robot reported, discarded ones included
    """
    unverified: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    """
    Reported, not discarded, and verified at no destination
    """
    unverified_over_72h: Annotated[
        int, Field(ge=-9007199254740991, le=9007199254740991)
    ]
    """
    Of those, reported more than 72 hours ago
    """
    bytes_unverified: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    """
    Manifest bytes of the unverified episodes
    """
    local_missing: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    """
    Episodes whose local files disappeared before a verified sync
    """
    pressure: Pressure | None = None
    """
    The disk pressure the robot last reported; absent until it reports one
    """


HttpStatus = TypeAliasType(
    "HttpStatus", Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
)


class DestinationCheck(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    result: Literal['pass', 'fail']
    """
    `pass` for a valid grant or a deferral
    """
    mode: Literal['granted', 'deferred']
    """
    what the provider answered; every failure counts as a deferral
    """
    http_status: HttpStatus | None
    latency_ms: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    failure: (
        Literal[
            'unreachable',
            'timeout',
            'http_error',
            'invalid_json',
            'schema_invalid',
            'destination_mismatch',
        ]
        | None
    ) = None
    """
    on `fail` only
    """
    message: str | None = None
    """
    on `fail` and on a deferral: what was wrong, in words
    """


class ReadLink(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    path: str
    url: str
    expires_at: str
    destination_id: str
    size_bytes: Annotated[int, Field(ge=-9007199254740991, le=9007199254740991)]
    sha256: str


class ReadLinks(BaseModel):
    model_config = ConfigDict(
        extra='allow',
    )
    episode_id: str
    destination_id: str
    files: list[ReadLink]
