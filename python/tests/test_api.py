"""Every resource of the sync client against the live cloud and simulated fleet."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import fleet
from fleet import errors, models

from .conftest import LiveEnv


def test_entitlements_usage_and_sync_health(api: fleet.Fleet, live: LiveEnv) -> None:
    ent = api.entitlements()
    assert ent.features["data.metadata"] is True and "admin" in ent.key.scopes
    usage = api.usage()
    assert any(u.meter == "episodes.started" for u in usage)
    rows = api.sync_health(robot_ids=live.robots)
    assert sorted(r.robot_id for r in rows) == sorted(live.robots)
    assert all(r.episodes_reported >= 3 and r.unverified == 0 for r in rows)


def test_api_keys_create_use_scope_and_revoke(api: fleet.Fleet, live: LiveEnv) -> None:
    created = api.api_keys.create(name=f"sdk-{uuid.uuid4().hex[:8]}", scopes=["data:read"])
    assert created.key.startswith("ak_")
    assert created.id in [k.id for k in api.api_keys.list()]
    with fleet.Fleet(url=live.url, api_key=created.key) as reader:
        assert reader.episodes.list(limit=1).items
        with pytest.raises(errors.InsufficientScopeError) as info:
            reader.datasets.create(name="not allowed", filter={})
        assert info.value.status == 403 and info.value.details["required_scope"] == "data:write"
        api.api_keys.revoke(created.id)
        with pytest.raises(errors.UnauthenticatedError) as refused:
            reader.episodes.list(limit=1)
        assert refused.value.status == 401 and created.key not in str(refused.value)


def test_a_wrong_key_is_401(live: LiveEnv) -> None:
    with fleet.Fleet(url=live.url, api_key="ak_" + "0" * 32) as stranger:
        with pytest.raises(errors.UnauthenticatedError) as info:
            stranger.robots.list()
    assert info.value.code == "unauthenticated" and info.value.request_id


def test_enrollment_tokens_enroll_and_an_offline_robot(api: fleet.Fleet) -> None:
    token = api.enrollment_tokens.create(name_prefix="sdk", max_uses=1)
    listed = [t.id for t in api.enrollment_tokens.iterate(limit=1)]
    assert token.id in listed and len(listed) == len(set(listed))
    enrolled = api.robots.enroll(token=token.token, name="sdk-offline")
    robot = api.robots.get(enrolled.robot_id)
    assert robot.name == "sdk-offline" and robot.connected is False
    # It never connects: a command is 503 robot_offline, raised as its class (after the bounded command retries).
    with pytest.raises(errors.RobotOfflineError) as info:
        api.robots.go_home(enrolled.robot_id)
    assert info.value.status == 503
    # The token was single-use.
    with pytest.raises(errors.UnauthenticatedError):
        api.robots.enroll(token=token.token)
    api.robots.deenroll(enrolled.robot_id)
    assert api.robots.get(enrolled.robot_id).deenrolled_at is not None
    with pytest.raises(errors.RobotDeenrolledError):
        api.robots.go_home(enrolled.robot_id)
    assert enrolled.robot_id not in [r.id for r in api.robots.iterate()]
    assert enrolled.robot_id in [r.id for r in api.robots.iterate(include_deenrolled=True)]
    other = api.enrollment_tokens.create()
    api.enrollment_tokens.revoke(other.id)
    with pytest.raises(errors.UnauthenticatedError):
        api.robots.enroll(token=other.token)


def test_robots_list_get_and_filters(api: fleet.Fleet, live: LiveEnv) -> None:
    page = api.robots.list(limit=1, connected=True)
    assert len(page.items) == 1 and page.cursor is not None
    ids = [r.id for r in api.robots.iterate(limit=1, connected=True)]
    assert set(live.robots) <= set(ids) and len(ids) == len(set(ids))
    robot = api.robots.get(live.robots[0])
    assert robot.connected and "episodes.v1" in robot.capabilities
    with pytest.raises(errors.NotFoundError) as info:
        api.robots.get("rbt_doesnotexist")
    assert info.value.status == 404


def test_robot_commands_results_and_declines(api: fleet.Fleet, live: LiveEnv) -> None:
    robot = live.robots[0]
    status = api.robots.stack_status(robot)
    assert status.ok and status.command == "stack.status" and status.robot_id == robot
    api.robots.stack_start(robot)
    # The stack runs now: starting it again is declined, an answer (200), not an exception.
    again = api.robots.stack_start(robot, idempotency_key=f"sdk-decline-{uuid.uuid4()}")
    assert again.declined and again.error is not None and again.error.code == "invalid_state"
    replay = api.robots.stack_start(robot, idempotency_key=again.cmd_id)
    assert replay.replayed and replay.error == again.error
    assert api.robots.command(robot, "stack/status").ok
    # An episode verb in the wrong state is 500 internal with the robot's reason.
    with pytest.raises(errors.InternalError) as info:
        api.robots.finish_episode(robot)
    assert info.value.details.get("robot_error") == "invalid_state"
    assert api.robots.stack_stop(robot).ok


def test_episode_paging_has_no_duplicates_and_no_gaps(api: fleet.Fleet, live: LiveEnv) -> None:
    robot = api.episodes.get(live.episodes[0]).robot_id
    everything = [e.id for e in api.episodes.list(robot_id=robot, limit=100).items]
    assert set(live.episodes) & set(everything) and len(everything) > 2
    pages = list(api.episodes.pages(robot_id=robot, limit=2))
    assert len(pages) >= 2 and all(len(p.items) <= 2 for p in pages) and pages[-1].cursor is None
    paged = [e.id for p in pages for e in p.items]
    assert paged == everything
    assert [e.id for e in api.episodes.iterate(robot_id=robot, limit=1)] == everything
    exported = [e.id for e in api.episodes.export(robot_id=robot, limit=2)]
    assert exported == everything
    # Across the whole organization (both robots), one row at a time.
    all_ids = [e.id for e in api.episodes.iterate(limit=1)]
    assert set(live.episodes) <= set(all_ids) and len(all_ids) == len(set(all_ids))


def test_episode_filters_annotate_outcome_segments_files(api: fleet.Fleet, live: LiveEnv, tmp_path: Path) -> None:
    target = live.episodes[0]
    episode = api.episodes.annotate(target, {"qa": "approved", "reviewer": "sdk", "gone": None})
    assert (
        episode.annotations is not None
        and episode.annotations["qa"] == "approved"
        and "gone" not in episode.annotations
    )
    assert [e.id for e in api.episodes.iterate(annotation={"qa": "approved", "reviewer": "sdk"})] == [target]
    with_metadata = next((e for e in api.episodes.iterate() if e.metadata), None)
    if with_metadata is not None and with_metadata.metadata is not None:
        key, value = next((k, v) for k, v in with_metadata.metadata.items() if isinstance(v, (str, int, bool)))
        assert with_metadata.id in [e.id for e in api.episodes.iterate(metadata={key: value})]
    assert api.episodes.list(metadata={"no-such-key": "x"}).items == []
    robot = api.episodes.get(target).robot_id
    assert all(e.robot_id == robot for e in api.episodes.iterate(robot_id=robot))

    changed = api.episodes.set_outcome(target, "failure", reason="sdk test: dropped after the end")
    assert changed.outcome == "failure"
    history = api.episodes.outcome_history(target)
    assert history[-1].to == "failure" and history[-1].reason.startswith("sdk test")
    api.episodes.override_outcome(target, changed.recorded_outcome or "success", reason="sdk test: restored")

    assert isinstance(api.episodes.segments(target), list)
    files = api.episodes.files(target)
    assert files.files and files.total_bytes == sum(f.size_bytes for f in files.files)

    out = tmp_path / "export.ndjson"
    count = api.episodes.export_to_file(out, limit=2)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert count == len(lines) >= len(live.episodes) and all(line["files"] for line in lines)

    with pytest.raises(errors.NotFoundError):
        api.episodes.get("ep_doesnotexist")
    with pytest.raises(errors.ValidationFailedError) as bad:
        api.episodes.list(cursor="not-a-cursor")
    assert bad.value.status == 400 and bad.value.details["issues"]


def test_datasets_create_snapshot_manifest_and_pandas(api: fleet.Fleet, live: LiveEnv) -> None:
    robot = live.robots[0]
    ds = api.datasets.create(name=f"sdk {uuid.uuid4().hex[:6]}", robot_id=robot, outcome="success")
    assert ds.filter == {"robot_id": robot, "outcome": "success"} and ds.snapshot_at is None
    assert api.datasets.count(ds.id).live is True
    with pytest.raises(errors.ConflictError):
        list(api.datasets.manifest(ds.id))  # live: no manifest yet
    snap = api.datasets.snapshot(ds.id)
    with pytest.raises(errors.ConflictError) as twice:
        api.datasets.snapshot(ds.id)
    assert twice.value.status == 409
    assert api.datasets.get(ds.id).episode_count == snap.episode_count
    assert ds.id in [d.id for d in api.datasets.iterate(limit=1)]
    lines = list(api.datasets.manifest(ds.id, limit=1))
    header, members = lines[0], lines[1:]
    assert isinstance(header, models.ManifestHeader) and header.episode_count == snap.episode_count
    assert all(isinstance(x, models.EpisodeWithLocations) and x.outcome == "success" for x in members)
    assert len(members) == snap.episode_count > 0
    frame = api.datasets.to_pandas(ds.id)
    assert list(frame["id"]) == [x.id for x in members if isinstance(x, models.EpisodeWithLocations)]
    assert (frame["total_bytes"] > 0).all() and str(frame["started_at"].dtype).startswith("datetime64")
    table = api.datasets.to_arrow(ds.id, limit=2)
    assert table.num_rows == len(members)


def test_idempotent_replays(api: fleet.Fleet) -> None:
    key = f"sdk-{uuid.uuid4()}"
    first = api.datasets.create(name="replayed", filter={"task_id": "x"}, idempotency_key=key)
    again = api.datasets.create(name="replayed", filter={"task_id": "x"}, idempotency_key=key)
    assert again == first
    with pytest.raises(errors.IdempotencyKeyReusedError) as info:
        api.datasets.create(name="another body", filter={"task_id": "x"}, idempotency_key=key)
    assert info.value.status == 422 and info.value.code == "idempotency_key_reused"


def test_webhooks_subscriptions_rotate_test_dead_letters(api: fleet.Fleet) -> None:
    hook = api.webhooks.create(url="https://127.0.0.1:9/sdk-hook", events=["episode.finalized", "episode.verified"])
    try:
        assert hook.secret.startswith("whsec_") and hook.id in [w.id for w in api.webhooks.list()]
        rotated = api.webhooks.rotate_secret(hook.id)
        assert rotated["secret"].startswith("whsec_") and rotated["secret"] != hook.secret
        queued = api.webhooks.test(hook.id)
        assert str(queued["event_id"]).startswith("evt_")
        assert api.webhooks.enable(hook.id).id == hook.id
        assert isinstance(api.webhooks.dead_letters(hook.id), list)
        assert isinstance(api.webhooks.deliveries(hook.id, limit=5).items, list)
        with pytest.raises(errors.NotFoundError):
            api.webhooks.redeliver(hook.id, "dlv_doesnotexist")
        with pytest.raises(ValueError):
            api.webhooks.create(url="not a url", events=["episode.finalized"])
    finally:
        api.webhooks.delete(hook.id)
    assert hook.id not in [w.id for w in api.webhooks.list()]


def test_destinations_and_routing_rules(api: fleet.Fleet, live: LiveEnv) -> None:
    assert live.destination_id in [d.id for d in api.destinations.list()]
    check = api.destinations.check(live.destination_id)
    assert check.result == "pass"
    spare = api.destinations.create(url="https://127.0.0.1:9/spare-grants")
    assert spare.secret.startswith("dsec_")
    api.destinations.revoke(spare.id)
    with pytest.raises(errors.ConflictError):
        api.destinations.check(spare.id)
    # A rule that matches everything to the one live destination routes as no rule does.
    everything = api.routing_rules.create(destination_id=live.destination_id, match={})
    narrow = api.routing_rules.create(destination_id=live.destination_id, match={"robot_id": live.robots})
    try:
        assert [r.id for r in api.routing_rules.list()][-2:] == [everything.id, narrow.id]
        ordered = api.routing_rules.set_order([narrow.id, everything.id])
        assert [r.id for r in ordered] == [narrow.id, everything.id]
        assert narrow.match == {"robot_id": live.robots}
    finally:
        api.routing_rules.delete(narrow.id)
        api.routing_rules.delete(everything.id)
    left = {r.id for r in api.routing_rules.list()}
    assert everything.id not in left and narrow.id not in left
