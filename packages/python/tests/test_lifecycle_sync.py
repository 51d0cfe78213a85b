"""The blocking client against a real daemon: lifecycle, snapshots and forks, previews, egress
rules, metrics, events, templates and the admin API."""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path

import httpx
import pytest

from sandboxd import (
    Admin,
    ApiClient,
    AuthenticationError,
    ConflictError,
    Events,
    InvalidStateError,
    NotFoundError,
    PermissionDeniedError,
    Sandbox,
    SandboxEvent,
    Snapshot,
    Template,
    TemplateBuildError,
    ValidationError,
)


def test_pause_resume_stop_start_and_invalid_states(client: ApiClient) -> None:
    with Sandbox.create("code-interpreter", client=client, timeout_seconds=300, internet_access=False) as sb:
        assert sb.status == "running" and sb.info.public_host.startswith("http")
        assert sb.info.template_name == "code-interpreter" and not sb.info.internet_access
        assert sb.info.organization_id.isdigit()
        sb.files.write("/workspace/keep.txt", "still here")
        assert sb.pause().status == "paused"
        with pytest.raises(InvalidStateError) as e:
            sb.pause()
        assert isinstance(e.value, ConflictError) and e.value.status == 409
        assert sb.resume().status == "running"
        assert sb.stop().status == "stopped"
        with pytest.raises(InvalidStateError):
            sb.pause()
        assert sb.start().status == "running"
        assert sb.files.read("/workspace/keep.txt") == "still here"
        t = sb.set_timeout(120)
        assert t.timeout_seconds == 120 and t.expires_at
        again = Sandbox.connect(sb.id, client=client)
        assert again.info.status == "running" and again.info.resources.memory_mb > 0
        assert sb.id in [s.id for s in Sandbox.list(status="running", client=client)]
        page = Sandbox.list_page(limit=1, client=client)
        assert len(page.data) == 1
        assert len(list(Sandbox.list(limit=1, max_items=2, client=client))) <= 2
        handle = Sandbox.from_id(sb.id, client=client)
        assert handle.commands.run("cat /workspace/keep.txt").stdout == "still here"
        assert handle.info.status == "running"
    with pytest.raises(NotFoundError):
        sb.get_info()


def test_sleep_settings_are_kept(client: ApiClient) -> None:
    with Sandbox.create(client=client, timeout_seconds=300, on_timeout="pause", idle_timeout_seconds=600, auto_resume=True, env_vars={"STAGE": "t"}) as sb:
        assert (sb.info.on_timeout, sb.info.idle_timeout_seconds, sb.info.auto_resume) == ("pause", 600, True)
        assert sb.commands.run("echo $STAGE").stdout == "t\n"


def test_snapshots_forks_restore_and_templates_of_snapshots(client: ApiClient) -> None:
    made: list = []
    snaps: list = []
    alias = f"py-snap-{secrets.token_hex(3)}"
    sb = Sandbox.create(client=client, timeout_seconds=600)
    made.append(sb)
    try:
        sb.files.write("/workspace/state.txt", "v1")
        v1 = sb.snapshot(name="v1")
        snaps.append(v1.id)
        assert (v1.name, v1.sandbox_id, v1.snapshot_id) == ("v1", sb.id, v1.id)
        assert v1.size >= 0
        sb.files.write("/workspace/state.txt", "v2")
        info = sb.restore(v1)
        assert info.id == sb.id
        assert sb.files.read("/workspace/state.txt") == "v1"
        forks = sb.fork(2, timeout_seconds=300)
        made.extend(forks)
        assert len(forks) == 2 and all(f.status == "running" for f in forks)
        forks[0].files.write("/workspace/state.txt", "changed in fork 0")
        assert forks[1].files.read("/workspace/state.txt") == "v1"
        fresh = Sandbox.create(snapshot=v1, client=client, timeout_seconds=300)
        made.append(fresh)
        assert fresh.files.read("/workspace/state.txt") == "v1"
        theirs = fresh.snapshot()
        snaps.append(theirs.id)
        with pytest.raises(ValidationError):
            sb.restore(theirs)
        assert [s.id for s in Snapshot.list(sandbox_id=sb.id, client=client)] == [v1.id]
        assert Snapshot.get(v1, client=client).name == "v1"
        assert Snapshot.list_page(limit=1, client=client).data
        tpl = Snapshot.to_template(v1, alias, client=client)
        assert tpl.name == alias
        from_tpl = Sandbox.create(alias, client=client, timeout_seconds=300)
        made.append(from_tpl)
        assert from_tpl.files.read("/workspace/state.txt") == "v1"
        with pytest.raises(ValueError):
            Sandbox.create("base", snapshot=v1, client=client)
    finally:
        for s in made:
            s.kill()
        try:
            Template.delete(alias, client=client)
        except NotFoundError:
            pass
        for sid in snaps:
            Snapshot.delete(sid, client=client)
    with pytest.raises(NotFoundError) as e:
        Snapshot.get(snaps[0], client=client)
    assert e.value.code == "SNAPSHOT_NOT_FOUND"


def test_previews_are_private_until_made_public(sandbox: Sandbox) -> None:
    sandbox.commands.run("mkdir -p /srv && echo hello > /srv/index.html && (nohup python3 -m http.server 8000 -d /srv -b 127.0.0.1 >/dev/null 2>&1 &)")
    sandbox.commands.run("for i in $(seq 50); do curl -sf http://127.0.0.1:8000/ >/dev/null && break; sleep 0.1; done")
    ports = sandbox.ports()
    assert any(p.port == 8000 and p.loopback_only and "127.0.0.1" in p.addresses for p in ports), ports
    preview = sandbox.get_preview_url(8000)
    assert not preview.public and preview.signed_url
    with httpx.Client(trust_env=False) as http:
        res = http.get(f"{preview.url}/index.html", headers=sandbox.preview_headers())
        assert (res.status_code, res.text) == (200, "hello\n")
        assert http.get(preview.url).status_code == 401
        opened = sandbox.get_preview_url(8000, public=True)
        assert opened.public
        assert http.get(f"{opened.url}/index.html").status_code == 200
        sandbox.get_preview_url(8000, public=False)
        assert http.get(preview.url).status_code == 401
    with pytest.raises(ValueError):
        sandbox.get_preview_url(70000)


def test_egress_rules(client: ApiClient) -> None:
    with Sandbox.create(client=client, timeout_seconds=300, allow_out=["pypi.org", "*.pythonhosted.org", "151.101.0.0/16"]) as sb:
        assert sb.info.network.allow_out == ["pypi.org", "*.pythonhosted.org", "151.101.0.0/16"]
        r = sb.commands.run("curl -sS -m 10 http://1.1.1.1/")
        assert r.exit_code != 0
        policy = sb.set_network(allow_out=["pypi.org", "*.pythonhosted.org"], deny_out=["151.101.0.0/16"])
        assert policy.deny_out == ["151.101.0.0/16"]
        assert sb.get_network().allow_out == ["pypi.org", "*.pythonhosted.org"]
        assert sb.info.network.deny_out == ["151.101.0.0/16"]
        with pytest.raises(ValidationError) as e:
            sb.set_network(allow_out=["not a host name!"])
        assert "not a host name!" in e.value.message
        assert sb.resources().egress_denied >= 1
    with Sandbox.create(client=client, timeout_seconds=300, internet_access=False) as closed:
        with pytest.raises(InvalidStateError):
            closed.set_network(internet_access=True)


def test_resources_and_their_stream(sandbox: Sandbox) -> None:
    r = sandbox.resources()
    assert r.sandbox_id == sandbox.id and r.memory_used_bytes > 0 and r.memory_limit_bytes > 0 and r.pids > 0
    samples = []
    for s in sandbox.resources_stream(interval=1):
        samples.append(s)
        if len(samples) == 2:
            break
    assert all(s.sandbox_id == sandbox.id for s in samples)


def _collect(stream, until, out: list) -> None:
    for ev in stream:
        out.append(ev)
        if until(ev):
            return


def test_lifecycle_events_of_a_sandbox_and_of_the_organization(client: ApiClient) -> None:
    events = Events(client=client)
    org_seen: list = []
    with events.stream() as org_stream:
        with Sandbox.create("base", client=client, timeout_seconds=300) as sb:
            seen: list = []
            with sb.events() as stream:
                t = threading.Thread(target=_collect, args=(stream, lambda e: e.kind == "resumed", seen))
                t.start()
                sb.pause()
                sb.resume()
                t.join(30)
            assert [e.kind for e in seen] == ["paused", "resumed"], seen
            assert all(isinstance(e, SandboxEvent) and e.sandbox_id == sb.id for e in seen)
            sid = sb.id
        t2 = threading.Thread(target=_collect, args=(org_stream, lambda e: e.kind == "deleted" and e.sandbox_id == sid, org_seen))
        t2.start()
        t2.join(30)
    kinds = [e.kind for e in org_seen if e.sandbox_id == sid]
    assert kinds[0] == "created" and kinds[-1] == "deleted", kinds
    token = events.token()
    assert token.token and token.expires_at
    with httpx.Client(trust_env=False) as http:
        with http.stream("GET", f"{client.config.base_url}/v1/events", params={"token": token.token}) as res:
            assert res.status_code == 200 and res.headers["content-type"].startswith("text/event-stream")


def test_templates_list_get_and_builtins_cannot_be_deleted(client: ApiClient) -> None:
    names = [t.name for t in Template.list(client=client)]
    assert "base" in names and "code-interpreter" in names
    base = Template.get("base", client=client)
    assert base.is_public and base.default_resources.vcpu >= 1
    with pytest.raises(PermissionDeniedError):
        Template.delete("base", client=client)
    with pytest.raises(NotFoundError) as e:
        Template.get("no-such-template", client=client)
    assert e.value.code == "TEMPLATE_NOT_FOUND"


def test_template_build_with_local_files_logs_and_progress(client: ApiClient, tmp_path: Path) -> None:
    (tmp_path / "app" / "data").mkdir(parents=True)
    (tmp_path / "app" / "main.py").write_text('print("hello from the template")\n')
    (tmp_path / "app" / "data" / "x.txt").write_text("x-data\n")
    (tmp_path / "uploaded.txt").write_text("uploaded by id\n")
    alias = f"py-tpl-{secrets.token_hex(3)}"
    [uploaded] = Template.upload_files(["uploaded.txt"], context_dir=str(tmp_path), client=client)
    assert uploaded["path"] == "uploaded.txt" and uploaded["file_id"]
    logs: list = []
    progress: list = []
    result = Template.build(
        alias,
        [
            {"type": "from", "image": "debian:11"},
            {"type": "run", "command": "echo built > /built.txt && echo building-now"},
            {"type": "copy", "src": "app", "dest": "/app"},
            {"type": "copy", "file_id": uploaded["file_id"], "dest": "/opt/by-id.txt"},
            {"type": "env", "key": "GREETING", "value": "hi from env"},
            {"type": "workdir", "path": "/app"},
        ],
        cpu=1,
        memory=512,
        disk_gb=2,
        context_dir=str(tmp_path),
        on_log=logs.append,
        on_progress=progress.append,
        poll_interval=0.5,
        client=client,
    )
    try:
        assert result.status == "active" and result.template and result.template.name == alias
        assert any("building-now" in e.message for e in logs), logs[-20:]
        assert progress and progress[-1].status == "active"
        assert Template.build_status(result.build_id, client=client).status == "active"
        assert "building-now" in Template.logs(result.build_id, client=client).logs
        assert any("building-now" in e.message for e in Template.follow_logs(result.build_id, client=client))
        with Sandbox.create(alias, client=client, timeout_seconds=300) as sb:
            r = sb.commands.run("cat /built.txt /app/data/x.txt /opt/by-id.txt; echo $GREETING; pwd; python3 /app/main.py || true")
            assert r.stdout.startswith("built\nx-data\nuploaded by id\nhi from env\n/app\n"), r
        with pytest.raises(ConflictError):
            Template.build(alias, [{"type": "from", "image": "debian:11"}], client=client)
    finally:
        Template.delete(alias, client=client)
    failing = f"{alias}-bad"
    with pytest.raises(TemplateBuildError) as e:
        Template.build(failing, [{"type": "from", "image": "debian:11"}, {"type": "run", "command": "echo about-to-fail; exit 7"}], client=client, poll_interval=0.5)
    assert e.value.build_id and any("about-to-fail" in line for line in e.value.logs), e.value.logs
    try:
        Template.delete(failing, client=client)
    except (NotFoundError, ConflictError):
        pass


def test_admin_orgs_and_keys(daemon: dict, client: ApiClient) -> None:
    admin = Admin(client=client)
    name = f"py-org-{secrets.token_hex(3)}"
    org = admin.create_org(name)
    assert org.name == name and org.id
    try:
        key = admin.create_key(name, scopes=["sandboxes:read", "sandboxes:write"], name="ci")
        assert key.secret and key.scopes == ["sandboxes:read", "sandboxes:write"]
        assert key.id in [k.id for k in admin.list_keys(org=name)]
        assert all(not getattr(k, "secret", None) for k in admin.list_keys(org=name))
        assert name in [o.name for o in admin.list_orgs()]
        theirs = ApiClient(key.secret, daemon["base_url"])
        assert list(Sandbox.list(client=theirs)) == []
        with pytest.raises(PermissionDeniedError):
            Admin(client=theirs).list_orgs()
        with Sandbox.create("base", client=theirs, timeout_seconds=300) as sb:
            assert sb.commands.run("echo theirs").stdout == "theirs\n"
            # Another organization's sandbox is not the operator's to use.
            with pytest.raises((NotFoundError, PermissionDeniedError)):
                Sandbox.connect(sb.id, client=client)
        revoked = admin.revoke_key(key.id)
        assert revoked.revoked_at
        with pytest.raises(AuthenticationError):
            list(Sandbox.list(client=theirs))
        theirs.close()
    finally:
        gone = admin.delete_org(name)
    assert gone.deleted["keys"] >= 1
    with pytest.raises(NotFoundError):
        admin.delete_org(name)


def test_volumes_outlive_sandboxes_and_are_shared(client: ApiClient) -> None:
    from sandboxd import Volume

    name = f"py-vol-{secrets.token_hex(3)}"
    vol = Volume.create(name, 1, client=client)
    try:
        assert (vol.name, vol.size_gb) == (name, 1)
        with pytest.raises(ConflictError):
            Volume.create(name, 1, client=client)
        with Sandbox.create("base", client=client, timeout_seconds=300, volumes=[{"volume": name, "path": "/data"}]) as writer:
            assert [(v.name, v.path, v.read_only) for v in writer.info.volumes] == [(name, "/data", False)]
            writer.commands.run("echo kept > /data/file.txt")
            assert Volume.get(vol, client=client).mounted_by == [writer.id]
            with pytest.raises(ConflictError) as e:
                Volume.delete(name, client=client)
            assert e.value.code == "VOLUME_IN_USE"
        with Sandbox.create("base", client=client, timeout_seconds=300, volumes=[{"volume": vol, "path": "/mnt/v", "read_only": True}]) as reader:
            assert reader.commands.run("cat /mnt/v/file.txt").stdout == "kept\n"
            assert reader.commands.run("touch /mnt/v/x").exit_code != 0
            assert (Volume.get(name, client=client).used_bytes or 0) > 0
            assert name in [v.name for v in Volume.list(client=client)]
            assert Volume.delete(name, force=True, client=client)["status"] == "deleted"
        with pytest.raises(NotFoundError) as nf:
            Volume.get(name, client=client)
        assert nf.value.code == "VOLUME_NOT_FOUND"
    finally:
        try:
            Volume.delete(name, force=True, client=client)
        except NotFoundError:
            pass
