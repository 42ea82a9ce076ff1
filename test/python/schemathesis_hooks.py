"""schemathesis hooks for the fuzzing of the /v1 API (test/schemathesis.test.ts loads this module
through SCHEMATHESIS_HOOKS).

Two things schemathesis cannot know from the OpenAPI document alone:

1. NDJSON. `GET /v1/episodes/export` and `GET /v1/datasets/{id}/manifest` answer
   `application/x-ndjson`: one JSON value per line, and the document's schema describes ONE line.
   The deserializer below reads every line; the schema hook states "an NDJSON body is an array of
   instances of that schema" so that each line is validated, not only the first.

2. Refusals of schema-valid requests for rules no JSON Schema can state. Each entry of ACCEPTED
   names the operation(s), the status, the error code and the issue codes the API answers with, and
   why no schema can express the rule. Only failures of `positive_data_acceptance` (ST202,
   "schema-valid request rejected") that match one exactly are dropped; every other failure,
   including any other refusal by the same operation, fails the run.

3. One mislabelling of schemathesis 4.32.5 itself (see `_mislabelled_header`): a coverage-phase
   case reported as schema-valid whose header value the document's own schema refuses. The hook
   checks that value against the document before dropping the failure.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import jsonschema_rs
import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData

NDJSON = "application/x-ndjson"


@schemathesis.deserializer(NDJSON)
def deserialize_ndjson(ctx: Any, response: Any) -> list[Any]:
    """Every non-empty line as a JSON value; a line that is not JSON is a deserialization failure."""
    text = response.content.decode(response.encoding or "utf-8")
    values = []
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip() == "":
            continue
        try:
            values.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"NDJSON line {number} is not JSON: {exc}") from exc
    return values


@schemathesis.hook
def before_load_schema(context: Any, raw_schema: dict[str, Any]) -> None:
    """An NDJSON response's schema describes one line: validate the body as an array of them."""
    for path_item in raw_schema.get("paths", {}).values():
        for operation in path_item.values():
            if not isinstance(operation, dict):
                continue
            for response in operation.get("responses", {}).values():
                media = response.get("content", {}).get(NDJSON) if isinstance(response, dict) else None
                if media is not None and "schema" in media:
                    media["schema"] = {"type": "array", "items": media["schema"]}


@dataclass(frozen=True)
class Accepted:
    """A refusal of a schema-valid request by design."""

    operations: frozenset[str]  # "METHOD /path" labels as schemathesis prints them
    status: int
    code: str  # the error code of the body (`error.code`)
    issues: frozenset[str] | None  # the issue codes of `error.details.issues[]`, when the rule names them
    why: str


ACCEPTED: tuple[Accepted, ...] = (
    Accepted(
        operations=frozenset(),  # every POST: the header is on all of them
        status=422,
        code="idempotency_key_reused",
        issues=None,
        why=(
            "schemathesis sends the same generated Idempotency-Key value with different bodies; the "
            "contract refuses a key reused with another request for 24 h. A schema describes one "
            "request, never its relation to an earlier one."
        ),
    ),
    Accepted(
        operations=frozenset(),  # every list operation that takes `cursor`
        status=400,
        code="validation_failed",
        issues=frozenset({"invalid_cursor"}),
        why=(
            "a cursor is opaque and only valid when this API handed it out (it encodes a position "
            "and its sort order); the document can bound its length, not its meaning."
        ),
    ),
    Accepted(
        operations=frozenset(),  # any URL
        status=400,
        code="validation_failed",
        issues=frozenset({"nul_character"}),
        why=(
            "no stored text can hold a NUL character (PostgreSQL text cannot), so the API refuses "
            "`%00` anywhere in a URL before any lookup (docs/api.md, Errors); one rule for the whole "
            "URL, not a constraint of any one parameter's schema."
        ),
    ),
    Accepted(
        operations=frozenset({"POST /v1/routing-rules"}),
        status=400,
        code="validation_failed",
        issues=frozenset({"destination_revoked"}),
        why="a rule may only route to a destination that is not revoked: the stored state of another resource.",
    ),
    Accepted(
        operations=frozenset(),  # any JSON body
        status=400,
        code="validation_failed",
        issues=frozenset({"forbidden_key"}),
        why=(
            "`__proto__` and `constructor.prototype` keys are refused at any depth of any body (a "
            "prototype-pollution guard of the JSON parser); the body schemas allow free-form objects "
            "(metadata, filters) whose keys no schema lists."
        ),
    ),
    Accepted(
        operations=frozenset({"POST /v1/api-keys", "POST /v1/robots/enrollment-tokens"}),
        status=400,
        code="validation_failed",
        issues=frozenset({"in_past"}),
        why=(
            "`expires_at` must be later than the server's clock at the time of the request; a "
            "schema's date-time format cannot say 'in the future'."
        ),
    ),
    Accepted(
        operations=frozenset({"PUT /v1/routing-rules/order"}),
        status=400,
        code="validation_failed",
        issues=frozenset({"not_a_permutation"}),
        why=(
            "`rule_ids` must list every routing rule of the organization exactly once: a property of "
            "the stored rules, not of the body."
        ),
    ),
    Accepted(
        operations=frozenset({"GET /v1/episodes", "GET /v1/episodes/export", "POST /v1/datasets"}),
        status=400,
        code="validation_failed",
        issues=frozenset({"destination_without_sync_state", "destination_mismatch", "range"}),
        why=(
            "rules between the episode filter's keys (docs/api.md, Episodes): `destination_id` (or a `to` "
            "that is not a date-time) only means something with `sync_state`; `to` and `destination_id` "
            "must not name two destinations; `from` must not be after `to`. OpenAPI parameters are "
            "described one at a time, and a dataset's `filter` is a free-form object: no schema relates "
            "two of them. Each rule has its own issue code, so no other refusal passes as one of these."
        ),
    ),
    Accepted(
        operations=frozenset({"GET /v1/events/stream"}),
        status=400,
        code="validation_failed",
        issues=frozenset({"unknown_event_id"}),
        why=(
            "a `Last-Event-ID` (or `last_event_id`) of the documented shape that this service did not "
            "give out: the 26-letter form is a sealed handle, so like a cursor its pattern can state "
            "its shape, not whether it names an event (docs/api.md, Events)."
        ),
    ),
    Accepted(
        operations=frozenset({"GET /v1/usage"}),
        status=400,
        code="validation_failed",
        issues=frozenset({"range"}),
        why=(
            "`from` must not be after `to` and the range spans at most 366 days: a relation between two "
            "parameters (and, when one is omitted, the server's date), which JSON Schema cannot state "
            "across query parameters."
        ),
    ),
)


def _error_issues(response: Any) -> tuple[str | None, list[dict[str, Any]]]:
    try:
        body = json.loads(response.content)
    except (ValueError, TypeError):
        return None, []
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None, []
    issues = (error.get("details") or {}).get("issues") or []
    return error.get("code"), [i for i in issues if isinstance(i, dict)]


def _error(response: Any) -> tuple[str | None, list[str]]:
    code, issues = _error_issues(response)
    return code, [i.get("code") for i in issues]


def _mislabelled_header(failure: Any, case: Any, response: Any) -> bool:
    """A "schema-valid request rejected" whose refused headers are not schema-valid at all.

    schemathesis 4.32.5's coverage phase narrows a header's values to [A-Za-z0-9] and, when the
    header's pattern needs another character (`Last-Event-ID` is `^evt_…`: the `_`), has no valid
    value to offer; it seeds an invalid one (`0`) into the case and still reports the case as
    positive. Only such a case is dropped: every issue of the refusal is a header, and each of those
    headers, as sent, is refused by its own schema in the document (checked here, not assumed).
    """
    if not isinstance(failure, RejectedPositiveData) or response.status_code != 400:
        return False
    code, issues = _error_issues(response)
    if code != "validation_failed" or not issues or any(i.get("location") != "headers" for i in issues):
        return False
    sent = {name.lower(): value for name, value in (case.headers or {}).items()}
    declared = {p.name.lower(): p for p in case.operation.headers}
    for issue in issues:
        name = str(issue.get("path", "")).lstrip("/").lower()
        parameter = declared.get(name)
        if parameter is None or name not in sent:
            return False
        if jsonschema_rs.validator_for(parameter.validation_schema).is_valid(sent[name]):
            return False  # a value the document admits: a real failure
    return True


def accepted_refusal(failure: Any, case: Any, response: Any) -> Accepted | None:
    """The ACCEPTED entry this failure is, or None."""
    if not isinstance(failure, RejectedPositiveData):
        return None
    label = f"{case.operation.method.upper()} {case.operation.path}"
    code, issues = _error(response)
    for entry in ACCEPTED:
        if entry.operations and label not in entry.operations:
            continue
        if response.status_code != entry.status or code != entry.code:
            continue
        # Every issue of the refusal must be an accepted one: a second, unrelated issue is a failure.
        if entry.issues is not None and (not issues or any(i not in entry.issues for i in issues)):
            continue
        return entry
    return None


# The key the fuzzer authenticates with (its id, `key_…`): revoking it would turn every later
# request into a 401 and end the run's meaning, so that one case is never generated.
OWN_KEY_ID = os.environ.get("FLEET_SCHEMATHESIS_KEY_ID")


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    """Every case except `DELETE /v1/api-keys/{the fuzzer's own key}`."""
    if OWN_KEY_ID is None or case.operation.method.upper() != "DELETE" or case.operation.path != "/v1/api-keys/{id}":
        return True
    return (case.path_parameters or {}).get("id") != OWN_KEY_ID


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure except the refusals ACCEPTED names and the mislabelled header cases."""
    return accepted_refusal(failure, case, response) is None and not _mislabelled_header(failure, case, response)
