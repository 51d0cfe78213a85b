"""The asyncio client against a real daemon: the same calls, awaited, and many at once."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import time
from pathlib import Path

import pytest

from sandboxd import (
    AsyncAdmin,
    AsyncApiClient,
    AsyncEvents,
    AsyncSandbox,
    AsyncSnapshot,
    AsyncTemplate,
    InvalidStateError,
    NotFoundError,
    TimeoutError,
)


async def test_create_run_code_and_kill(aclient: AsyncApiClient) -> None:
    sb = await AsyncSandbox.create("code-interpreter", client=aclient, timeout_seconds=300)
    try:
        r = await sb.run_code("import sys; print(sum(range(10)), sys.version_info.major)")
        assert r.stdout == "45 3\n"
        assert (await sb.get_info()).status == "running"
        assert sb.id in [s.id async for s in AsyncSandbox.list(client=aclient)]
    finally:
        assert (await sb.kill()).status == "deleted"
    with pytest.raises(NotFoundError):
        await AsyncSandbox.connect(sb.id, client=aclient)


async def test_many_calls_at_once_in_separate_contexts(asandbox: AsyncSandbox) -> None:
    contexts = await asyncio.gather(*(asandbox.create_code_context() for _ in range(3)))
    t0 = time.monotonic()
    results = await asyncio.gather(*(asandbox.run_code(f"import time; time.sleep(1); n = {i}\nn * 10", context=c) for i, c in enumerate(contexts)))
    assert [r.result for r in results] == ["0", "10", "20"]
    assert time.monotonic() - t0 < 2.8, "the contexts ran in parallel"
    assert {r.context_id for r in results} == {c.id for c in contexts}


async def test_streaming_commands_processes_and_env(asandbox: AsyncSandbox) -> None:
    seen: list = []
    r = await asandbox.commands.run("for i in 1 2 3; do echo $i; sleep 0.2; done", on_stdout=seen.append)
    assert "".join(seen) == "1\n2\n3\n" == r.stdout
    s = await asandbox.run_code("print('streamed')", on_stdout=seen.append)
    assert s.stdout == "streamed\n" and s.language == "python"
    job = await asandbox.commands.background("sleep 1; echo bg")
    done = await asandbox.processes.wait(job.process_id, timeout=20)
    assert done.status == "completed" and "bg" in (done.stdout or "")
    await asandbox.env.update({"X": "1"})
    assert (await asandbox.env.get_all())["X"] == "1"
    assert (await asandbox.commands.run("echo $X")).stdout == "1\n"


async def test_files_stream_both_ways(asandbox: AsyncSandbox, tmp_path: Path) -> None:
    data = os.urandom(5 * 1024 * 1024 + 17)

    async def chunks():
        for i in range(0, len(data), 1 << 20):
            yield data[i : i + (1 << 20)]
            await asyncio.sleep(0)

    up = await asandbox.files.upload("/workspace/async.bin", chunks())
    assert up.size == len(data)
    got = b"".join([c async for c in asandbox.files.download_stream("/workspace/async.bin")])
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    local = tmp_path / "a.bin"
    local.write_bytes(data)
    await asandbox.files.upload_file(str(local), "/workspace/a.bin")
    await asandbox.files.download_file("/workspace/a.bin", str(tmp_path / "b.bin"))
    assert (tmp_path / "b.bin").read_bytes() == data
    await asandbox.files.write("/workspace/t.txt", "text")
    assert await asandbox.files.read("/workspace/t.txt") == "text"
    assert [f.name for f in await asandbox.files.list("/workspace") if f.name == "t.txt"] == ["t.txt"]
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f.txt").write_text("f\n")
    await asandbox.files.upload_directory(str(tmp_path / "d"), "/workspace/d")
    back = await asandbox.files.download_directory("/workspace/d", str(tmp_path / "d2"))
    assert back["files"] == 1 and (tmp_path / "d2" / "e" / "f.txt").read_text() == "f\n"


async def test_watch_and_terminal(asandbox: AsyncSandbox) -> None:
    await asandbox.files.mkdir("/workspace/w")
    async with await asandbox.files.watch("/workspace/w") as watcher:
        await asandbox.files.write("/workspace/w/new.txt", "x")
        # The agent writes a file aside and renames it in place: the last change names it.
        paths = []
        while "/workspace/w/new.txt" not in paths:
            change = await watcher.next(timeout=10)
            assert change is not None
            paths.append(change.path)
    async with await asandbox.terminal(cols=80, rows=24) as term:
        await term.write("echo $((6 * 7))\r")
        assert "42" in await term.wait_for("42")
        await term.write("exit 5\r")
        assert await term.wait(timeout=10) == 5
        assert [c async for c in term] == []


async def test_lifecycle_snapshot_fork_and_events(aclient: AsyncApiClient) -> None:
    async with await AsyncSandbox.create("base", client=aclient, timeout_seconds=300) as sb:
        async with await sb.events() as stream:
            await sb.pause()
            with pytest.raises(InvalidStateError):
                await sb.pause()
            await sb.resume()
            kinds = []
            async for ev in stream:
                kinds.append(ev.kind)
                if ev.kind == "resumed":
                    break
        assert kinds == ["paused", "resumed"]
        await sb.files.write("/workspace/s.txt", "snap")
        snap = await sb.snapshot(name="a")
        try:
            [fork] = await sb.fork()
            async with fork:
                assert await fork.files.read("/workspace/s.txt") == "snap"
            assert [s.id async for s in AsyncSnapshot.list(sandbox_id=sb.id, client=aclient)] == [snap.id]
            await sb.files.write("/workspace/s.txt", "changed")
            await sb.restore(snap)
            assert await sb.files.read("/workspace/s.txt") == "snap"
        finally:
            await AsyncSnapshot.delete(snap, client=aclient)
        assert (await sb.set_timeout(200)).timeout_seconds == 200
        assert (await sb.resources()).sandbox_id == sb.id
        assert (await sb.get_network()).internet_access
        assert (await sb.health()).status


async def test_org_events_templates_and_admin(aclient: AsyncApiClient) -> None:
    events = AsyncEvents(client=aclient)
    async with await events.stream() as stream:
        sb = await AsyncSandbox.create("base", client=aclient, timeout_seconds=300)
        await sb.kill()
        kinds = []
        async for ev in stream:
            if ev.sandbox_id == sb.id:
                kinds.append(ev.kind)
                if ev.kind == "deleted":
                    break
    assert kinds[0] == "created" and kinds[-1] == "deleted"
    assert "base" in [t.name for t in await AsyncTemplate.list(client=aclient)]
    assert (await AsyncTemplate.get("code-interpreter", client=aclient)).is_public
    admin = AsyncAdmin(client=aclient)
    name = f"py-aorg-{secrets.token_hex(3)}"
    await admin.create_org(name)
    key = await admin.create_key(name)
    assert key.secret and key.org == name
    assert (await admin.delete_org(name)).deleted["keys"] == 1


async def test_client_side_timeouts(asandbox: AsyncSandbox) -> None:
    with pytest.raises(TimeoutError):
        await asandbox.run_code("import time; time.sleep(30)", request_timeout=1)
    with pytest.raises(TimeoutError):
        await asandbox.commands.run("sleep 30", on_stdout=print, request_timeout=1)
    # Cancelling a task is how asyncio code gives up on a call.
    task = asyncio.ensure_future(asandbox.commands.run("sleep 30"))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await asandbox.commands.run("echo still-fine")).stdout == "still-fine\n"
