"""The blocking client against a real daemon: code, commands, processes, files, env, terminal,
agent reports (one shared sandbox)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest

from sandboxd import (
    AuthenticationError,
    NotFoundError,
    Sandbox,
    SandboxdError,
    TimeoutError,
    ValidationError,
)


def test_run_code_keeps_state_and_returns_the_last_value(sandbox: Sandbox) -> None:
    r = sandbox.run_code("import sys; print(sum(range(10)), sys.version_info.major)")
    assert (r.stdout, r.exit_code, r.success) == ("45 3\n", 0, True)
    sandbox.run_code("import math\nradius = 2")
    area = sandbox.run_code("round(math.pi * radius ** 2, 2)")
    assert area.result == "12.57"
    assert area.context_id


def test_a_failure_in_code_is_a_result_not_an_exception(sandbox: Sandbox) -> None:
    r = sandbox.run_code("raise ValueError('boom')")
    assert not r.success
    assert "ValueError" in r.stderr
    t = sandbox.run_code("import time; time.sleep(5)", timeout=1, isolated=True)
    assert t.timed_out


def test_other_languages_and_stdin(sandbox: Sandbox) -> None:
    js = sandbox.run_code("const xs = [1, 2, 3]\nxs.map((x) => x * 2)", language="javascript")
    assert js.result == "[ 2, 4, 6 ]"
    sh = sandbox.run_code("read a; echo got:$a", language="bash", stdin="hello\n")
    assert sh.stdout == "got:hello\n"
    raw = sandbox.run_code("import sys; print(sys.stdin.buffer.read().hex())", stdin=b"\x00\xff", isolated=True)
    assert raw.stdout == "00ff\n"


def test_streamed_output_arrives_while_the_code_runs(sandbox: Sandbox) -> None:
    seen: list = []
    stamps: list = []
    errs: list = []
    r = sandbox.run_code(
        'for i in 1 2 3; do echo "step $i"; sleep 0.3; done; echo oops >&2; exit 4',
        language="bash",
        on_stdout=lambda d: (seen.append(d), stamps.append(time.monotonic())),
        on_stderr=errs.append,
    )
    assert "".join(seen).split() == ["step", "1", "step", "2", "step", "3"]
    assert r.exit_code == 4 and "step 3" in r.stdout and "oops" in "".join(errs)
    assert stamps[-1] - stamps[0] > 0.4, "output came while it ran, not all at the end"


def test_code_contexts_are_separate_interpreters(sandbox: Sandbox) -> None:
    ctx = sandbox.create_code_context(env={"MODE": "test"})
    assert ctx.id and ctx.language == "python"
    sandbox.run_code("seen = []", context=ctx)
    sandbox.run_code("seen.append(1)", context=ctx)
    assert sandbox.run_code("len(seen)", context=ctx).result == "1"
    assert sandbox.run_code("import os\nos.environ['MODE']", context=ctx).result == "'test'"
    assert sandbox.run_code("print('radius' in dir())", context=ctx).stdout == "False\n"
    assert ctx.id in [c.id for c in sandbox.list_code_contexts()]
    assert any(k.context_id == ctx.id for k in sandbox.kernels())
    sandbox.restart_code_context(ctx)
    assert "NameError" in sandbox.run_code("seen", context=ctx).stderr
    sandbox.delete_code_context(ctx)
    with pytest.raises(NotFoundError) as e:
        sandbox.run_code("1", context=ctx)
    assert e.value.code == "CONTEXT_NOT_FOUND"


def test_rich_outputs_are_saved_as_files(sandbox: Sandbox) -> None:
    r = sandbox.run_code(
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()",
        rich=True,
        isolated=True,
        timeout=120,
    )
    assert r.exit_code == 0, r.stderr
    assert r.rich_outputs, r
    png = r.rich_outputs[0]
    assert png.mime == "image/png"
    assert sandbox.files.download(png.path)[:8] == b"\x89PNG\r\n\x1a\n"


def test_commands_shell_lines_exact_args_env_and_cwd(sandbox: Sandbox) -> None:
    assert int(sandbox.commands.run("ls / | wc -l").stdout) > 5
    assert sandbox.commands.run("printf", args=["%s|", "one arg", "$HOME"]).stdout == "one arg|$HOME|"
    r = sandbox.commands.run('echo "$GREETING from $(pwd)"', env={"GREETING": "hi"}, working_dir="/tmp")
    assert r.stdout == "hi from /tmp\n"
    assert sandbox.commands.run("exit 3").exit_code == 3
    out: list = []
    s = sandbox.commands.run("echo a; echo b", on_stdout=out.append)
    assert "".join(out) == "a\nb\n" == s.stdout


def test_background_processes_are_followed_and_killed(sandbox: Sandbox) -> None:
    job = sandbox.run_code_background('import time; time.sleep(1); print("done")', name="job")
    assert job.process_id
    finished = sandbox.processes.wait(job.process_id, timeout=30)
    assert (finished.status, finished.exit_code) == ("completed", 0)
    assert "done" in (finished.stdout or "")
    sleeper = sandbox.commands.background("sleep 600")
    assert sandbox.processes.get(sleeper.process_id).status == "running"
    sandbox.processes.kill(sleeper.process_id)
    assert sandbox.processes.wait(sleeper.process_id, timeout=10).status == "killed"
    assert sleeper.process_id in [p.process_id for p in sandbox.processes.list()]
    with pytest.raises(NotFoundError):
        sandbox.processes.get("no-such-process")


def test_files_text_bytes_listing_and_errors(sandbox: Sandbox) -> None:
    sandbox.files.write("/workspace/notes/hello.txt", "hello\n")
    assert sandbox.files.read("/workspace/notes/hello.txt") == "hello\n"
    assert [(f.name, f.size, f.is_dir) for f in sandbox.files.list("/workspace/notes")] == [("hello.txt", 6, False)]
    sandbox.files.write("/workspace/bin.dat", bytes(range(256)), mode="0600")
    assert sandbox.files.download("/workspace/bin.dat") == bytes(range(256))
    assert sandbox.commands.run("stat -c %a /workspace/bin.dat").stdout.strip() == "600"
    sandbox.files.mkdir("/workspace/a/b/c")
    assert sandbox.files.exists("/workspace/a/b/c") and sandbox.files.is_directory("/workspace/a/b/c")
    assert not sandbox.files.is_directory("/workspace/bin.dat")
    sandbox.files.remove("/workspace/a")
    assert not sandbox.files.exists("/workspace/a")
    with pytest.raises(NotFoundError) as e:
        sandbox.files.read("/workspace/a/missing.txt")
    assert (e.value.code, e.value.status, e.value.path) == ("FILE_NOT_FOUND", 404, "/workspace/a/missing.txt")
    assert e.value.request_id


def test_big_files_stream_up_and_down(sandbox: Sandbox, tmp_path: Path) -> None:
    local = tmp_path / "blob.bin"
    local.write_bytes(os.urandom(20 * 1024 * 1024))
    progress: list = []
    up = sandbox.files.upload_file(str(local), "/workspace/blob.bin", on_progress=progress.append)
    assert up.size == 20 * 1024 * 1024
    assert progress[-1] == up.size and len(progress) > 10, "the body was streamed in chunks"
    copy = tmp_path / "copy.bin"
    got = sandbox.files.download_file("/workspace/blob.bin", str(copy))
    assert got.size == up.size
    assert hashlib.sha256(local.read_bytes()).digest() == hashlib.sha256(copy.read_bytes()).digest()
    remote = sandbox.commands.run("sha256sum /workspace/blob.bin").stdout.split()[0]
    assert remote == hashlib.sha256(local.read_bytes()).hexdigest()
    # A generator of chunks goes up as it is produced; download_stream gives chunks back.
    sandbox.files.upload("/workspace/gen.bin", (bytes([i]) * 100_000 for i in range(30)))
    chunks = list(sandbox.files.download_stream("/workspace/gen.bin"))
    assert b"".join(chunks) == b"".join(bytes([i]) * 100_000 for i in range(30))
    with open(local, "rb") as f:
        assert sandbox.files.upload("/workspace/fileobj.bin", f).size == up.size
    with pytest.raises(NotFoundError):
        sandbox.files.download_file("/workspace/nope.bin", str(tmp_path / "nope"))
    assert not (tmp_path / "nope").exists()


def test_directories_go_up_and_down_whole(sandbox: Sandbox, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg" / "deep").mkdir(parents=True)
    (src / "pkg" / "deep" / "x.txt").write_text("x\n")
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    os.chmod(src / "run.sh", 0o755)
    os.symlink("pkg/deep/x.txt", src / "link")
    sandbox.files.upload_directory(str(src), "/workspace/tree")
    assert sandbox.commands.run("/workspace/tree/run.sh").stdout == "ran\n"
    assert sandbox.commands.run("readlink /workspace/tree/link; cat /workspace/tree/link").stdout == "pkg/deep/x.txt\nx\n"
    sandbox.commands.run("echo made-inside > /workspace/tree/pkg/new.txt")
    dest = tmp_path / "back"
    got = sandbox.files.download_directory("/workspace/tree", str(dest))
    assert got["files"] >= 3
    assert (dest / "pkg" / "new.txt").read_text() == "made-inside\n"
    assert os.access(dest / "run.sh", os.X_OK)
    assert os.readlink(dest / "link") == "pkg/deep/x.txt"
    with pytest.raises(NotFoundError):
        sandbox.files.download_directory("/workspace/missing-dir", str(tmp_path / "m"))
    with pytest.raises(ValidationError) as e:
        sandbox.files.download_directory("/workspace/tree/run.sh", str(tmp_path / "m"))
    assert e.value.code == "NOT_A_DIRECTORY"


def test_watch_reports_changes_below_a_directory(sandbox: Sandbox) -> None:
    sandbox.files.mkdir("/workspace/project/src")
    with sandbox.files.watch("/workspace/project") as watcher:
        assert watcher.path == "/workspace/project"
        sandbox.commands.run("cd /workspace/project && echo 'print(1)' > src/main.py && mv src/main.py src/app.py")
        events = []
        for change in watcher:
            events.append((change.event, change.path, change.old_path))
            if change.event == "renamed":
                break
    assert ("created", "/workspace/project/src/main.py", None) in events
    assert events[-1] == ("renamed", "/workspace/project/src/app.py", "/workspace/project/src/main.py")
    assert watcher.closed


def test_env_vars_apply_to_later_runs(sandbox: Sandbox) -> None:
    sandbox.env.set("API_URL", "http://example.invalid")
    sandbox.env.update({"A": "1", "B": "2"})
    assert "B" not in sandbox.env.delete("B")
    vars_ = sandbox.env.get_all()
    assert (vars_["API_URL"], vars_["A"], vars_.get("B")) == ("http://example.invalid", "1", None)
    assert sandbox.env.get("A") == "1"
    assert sandbox.commands.run("echo $A").stdout == "1\n"
    assert sandbox.commands.run("echo $A", env={"A": "call"}).stdout == "call\n"
    sandbox.env.replace({"ONLY": "this"})
    assert sandbox.env.get_all() == {"ONLY": "this"}


def test_terminal_is_an_interactive_shell(sandbox: Sandbox) -> None:
    with sandbox.terminal(cols=100, rows=30) as term:
        term.write('echo "sum=$((40 + 2))"\r')
        term.wait_for("sum=42")
        term.resize(120, 40)
        term.write("stty size\r")
        term.wait_for("40 120")
        term.write("exit 3\r")
        assert term.wait(timeout=10) == 3
        assert term.read() is None


def test_terminal_wait_for_times_out(sandbox: Sandbox) -> None:
    with sandbox.terminal() as term:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            term.wait_for("never-printed", timeout=1)
        assert time.monotonic() - t0 < 5


def test_agent_reports(sandbox: Sandbox) -> None:
    h = sandbox.health()
    assert h.status in ("healthy", "ok")
    info = sandbox.agent_info()
    assert info.sandbox_id == sandbox.id
    m = sandbox.metrics()
    assert m.total_requests > 0 and m.requests_total
    stats = sandbox.cache.stats()
    assert stats.size >= 0
    assert sandbox.cache.clear() >= 0


def test_token_is_refreshed_when_refused(sandbox: Sandbox) -> None:
    before = sandbox.token
    assert before and before["token"]
    again = Sandbox.connect(sandbox.id, auth_token="not-a-valid-token", client=sandbox.client)
    assert again.commands.run("echo ok").stdout == "ok\n"
    assert again.token and again.token["token"] != "not-a-valid-token"
    fresh = sandbox.refresh_token()
    assert fresh["expires_at"] is not None


def test_concurrent_calls_from_threads_share_one_sandbox(sandbox: Sandbox) -> None:
    out: dict = {}

    def work(i: int) -> None:
        out[i] = sandbox.commands.run(f"echo {i}").stdout

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {i: f"{i}\n" for i in range(8)}


def test_client_side_timeout_is_a_timeout_error(sandbox: Sandbox) -> None:
    with pytest.raises(TimeoutError) as e:
        sandbox.commands.run("sleep 30", request_timeout=1)
    assert e.value.code == "TIMEOUT"


def test_wrong_credentials_and_missing_things(daemon: dict, sandbox: Sandbox) -> None:
    with pytest.raises(AuthenticationError) as e:
        list(Sandbox.list(api_key="wrong", base_url=daemon["base_url"]))
    assert isinstance(e.value, SandboxdError) and e.value.status == 401
    with pytest.raises(NotFoundError) as nf:
        Sandbox.connect("sb_does_not_exist")
    assert (nf.value.code, nf.value.status) == ("NOT_FOUND", 404)
    assert nf.value.request_id


def test_background_output_is_kept_and_attachable(sandbox: Sandbox) -> None:
    job = sandbox.commands.background("for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.3; done; exit 2")
    events = list(sandbox.processes.attach(job.process_id))
    assert events[-1].type == "exit" and events[-1].exit_code == 2, events[-3:]
    text = "".join(e.data for e in events if e.type == "stdout")
    assert text == "out1\nout2\nout3\n"
    assert "".join(e.data for e in events if e.type == "stderr") == "err1\nerr2\nerr3\n"
    out = sandbox.processes.output(job.process_id)
    assert out.complete and out.exit_code == 2 and out.lost_bytes == 0
    assert [c.data for c in out.chunks if c.stream == "stdout"] == ["out1\n", "out2\n", "out3\n"]
    later = sandbox.processes.output(job.process_id, since=out.chunks[2].offset)
    assert later.text == out.text[len("".join(c.data for c in out.chunks[:2])) :]
    assert list(sandbox.processes.attach(job.process_id, since=out.next_offset))[0].type == "exit"
