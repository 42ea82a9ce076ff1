"""The async client against the live cloud: the same resources, awaited."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import fleet
from fleet import errors

from .conftest import LiveEnv


def test_async_client_reads_pages_commands_and_errors(live: LiveEnv) -> None:
    async def run() -> None:
        async with fleet.AsyncFleet(url=live.url, api_key=live.admin_key) as api:
            ent, robots = await asyncio.gather(api.entitlements(), api.robots.list(limit=100))
            assert ent.tier and set(live.robots) <= {r.id for r in robots.items}
            ids = [e.id async for e in api.episodes.iterate(robot_id=live.robots[0], limit=2)]
            listed = [e.id for e in (await api.episodes.list(robot_id=live.robots[0], limit=100)).items]
            assert ids == listed and len(ids) == len(set(ids))
            exported = [e.id async for e in api.episodes.export(robot_id=live.robots[0], limit=2)]
            assert sorted(exported) == sorted(listed)
            status = await api.robots.stack_status(live.robots[-1])
            assert status.ok and status.robot_id == live.robots[-1]
            with pytest.raises(errors.NotFoundError):
                await api.datasets.get("ds_doesnotexist")
            ds = await api.datasets.create(name=f"async {uuid.uuid4().hex[:6]}", robot_id=live.robots[-1])
            await api.datasets.snapshot(ds.id)
            members = [m async for m in api.datasets.members(ds.id)]
            assert {m.robot_id for m in members} == {live.robots[-1]}
            frame = await api.datasets.to_pandas(ds.id)
            assert len(frame) == len(members)

    asyncio.run(run())
