"""The hooks of branch, tag and merge operations made with file operations on a real mount
fire with the same webhook payloads as the same operations made with the CLI: an action file
committed on main sends every such event to a loopback HTTP server (tests/actions), each
operation is made once through the mount and once with ``lakefuse ...`` in the same state, and
the bodies are compared whole, but for ``event_time`` (and, for the two merges, the names of
their two destinations and their own merge commits).  A rejecting pre-merge hook fails the
``echo`` with EPERM and its message is readable from ``.lakefuse/merge``."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakemount import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "actions"))
from actions_helpers import FORBIDDEN_BODY, action_yaml, running_hook_server  # noqa: E402

EVENTS = ("pre-merge", "post-merge", "pre-create-branch", "post-create-branch", "pre-create-tag",
          "post-create-tag", "pre-delete-branch", "post-delete-branch")


@pytest.fixture(scope="module")
def hook_server(lake_home, tmp_path_factory):
    """Every event of ``EVENTS`` on any branch posted to ``/ok`` (answers 200), and pre-merge
    into branches named ``gated-*`` to ``/switch`` (403 until a test says otherwise)."""
    with running_hook_server() as server:
        folder = tmp_path_factory.mktemp("actions")
        on_all = "".join(f"  {event}:\n" for event in EVENTS)
        (folder / "all.yaml").write_bytes(action_yaml("Record", [("record", server.url("/ok"))], on=on_all))
        (folder / "gate.yaml").write_bytes(action_yaml("Gate", [("gate", server.url("/switch"))],
                                                       on="  pre-merge:\n    branches: [gated-*]\n"))
        catalog = lake_home.catalog
        for name in ("all.yaml", "gate.yaml"):
            catalog.upload_bytes("sales", "main", f"_lakefs_actions/{name}", (folder / name).read_bytes())
        catalog.commit("sales", "main", "hooks", "tests")
        yield server


def sh(script: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], env=dict(os.environ, **env), capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def bodies_of(server, action: str, run) -> list[dict]:
    """The bodies of the ``action`` webhook requests ``run()`` caused, in order."""
    with server.lock:
        before = len(server.requests)
    run()
    with server.lock:
        requests = server.requests[before:]
    out = []
    for request in requests:
        body = request.json()
        if body["action_name"] == action:
            body.pop("event_time")
            out.append(body)
    return out


def cli(monkeypatch, capsys, lake_home, *argv):
    return lambda: run_cli(monkeypatch, capsys, lake_home, *argv)


def ok(script: str, **env):
    def run():
        done = sh(script, **env)
        assert done.returncode == 0, done.stderr
    return run


def test_branch_and_tag_hooks_through_the_mount_have_the_clis_payloads(lake, lake_home, hook_server,
                                                                          monkeypatch, capsys):
    m = str(lake.mountpoint)
    made_by_mkdir = bodies_of(hook_server, "Record", lambda: os.mkdir(lake / "sales/hb"))
    deleted_by_cli = bodies_of(hook_server, "Record", cli(monkeypatch, capsys, lake_home, "branch", "delete",
                                                          "lakefs://sales/hb"))
    made_by_cli = bodies_of(hook_server, "Record", cli(monkeypatch, capsys, lake_home, "branch", "create",
                                                       "lakefs://sales/hb", "--source", "lakefs://sales/main"))
    deleted_by_rmdir = bodies_of(hook_server, "Record", lambda: os.rmdir(lake / "sales/hb"))
    made_by_control = bodies_of(hook_server, "Record", ok('echo hb > "$M/sales/main/.lakefuse/branch"', M=m))

    assert [b["event_type"] for b in made_by_cli] == ["pre-create-branch", "post-create-branch"]
    assert made_by_cli[0]["branch_id"] == "hb" and made_by_cli[0]["source_ref"] == "main"
    assert made_by_mkdir == made_by_cli == made_by_control
    assert [b["event_type"] for b in deleted_by_cli] == ["pre-delete-branch", "post-delete-branch"]
    assert deleted_by_rmdir == deleted_by_cli

    tagged_by_control = bodies_of(hook_server, "Record", ok('echo t1 > "$M/sales/hb/.lakefuse/tag"', M=m))
    run_cli(monkeypatch, capsys, lake_home, "tag", "delete", "lakefs://sales/t1")
    tagged_by_cli = bodies_of(hook_server, "Record", cli(monkeypatch, capsys, lake_home, "tag", "create",
                                                         "lakefs://sales/t1", "lakefs://sales/hb"))
    assert [b["event_type"] for b in tagged_by_cli] == ["pre-create-tag", "post-create-tag"]
    assert tagged_by_cli[0]["tag_id"] == "t1"
    assert tagged_by_control == tagged_by_cli


def test_merge_hooks_through_the_mount_have_the_clis_payloads(lake, lake_home, hook_server, monkeypatch, capsys):
    catalog = lake_home.catalog
    for name in ("msrc", "mdst1", "mdst2"):
        catalog.create_branch("sales", name, "main")
    (lake / "sales/msrc/merged.txt").write_text("m")
    assert sh('echo "add merged.txt" > "$M/sales/msrc/.lakefuse/commit"', M=str(lake.mountpoint)).returncode == 0

    by_mount = bodies_of(hook_server, "Record", ok('echo msrc > "$M/sales/mdst1/.lakefuse/merge"',
                                                   M=str(lake.mountpoint)))
    by_cli = bodies_of(hook_server, "Record", cli(monkeypatch, capsys, lake_home, "merge", "lakefs://sales/msrc",
                                                  "lakefs://sales/mdst2"))
    assert [b["event_type"] for b in by_cli] == ["pre-merge", "post-merge"]
    assert by_cli[1]["commit_id"] == catalog.get_branch("sales", "mdst2").commit_id
    assert by_mount[1]["commit_id"] == catalog.get_branch("sales", "mdst1").commit_id
    # the same but for the destination's name and its merge commit
    for body in by_mount + by_cli:
        body.pop("commit_id", None)
    as_if_mdst2 = json.loads(json.dumps(by_mount).replace("mdst1", "mdst2"))
    assert by_cli[0]["source_ref"] == "msrc" and by_cli[0]["commit_message"] == "Merge 'msrc' into 'mdst2'"
    assert as_if_mdst2 == by_cli


def test_a_rejecting_pre_merge_hook_fails_the_echo_and_says_why_in_the_merge_file(lake, lake_home, hook_server):
    catalog = lake_home.catalog
    catalog.create_branch("sales", "gated-main", "main")
    catalog.create_branch("sales", "gsrc", "main")
    (lake / "sales/gsrc/g.txt").write_text("g")
    assert sh('echo "add g.txt" > "$M/sales/gsrc/.lakefuse/commit"', M=str(lake.mountpoint)).returncode == 0
    before = catalog.get_branch("sales", "gated-main").commit_id
    control = lake / "sales/gated-main/.lakefuse/merge"

    hook_server.switch_status = 403
    done = sh('echo gsrc > "$C"', C=str(control))
    assert done.returncode != 0 and os.strerror(errno.EPERM) in done.stderr
    text = control.read_text()
    assert text.startswith("error: pre-merge hook 'gate' of action 'Gate' failed: HTTP 403")
    assert FORBIDDEN_BODY in text
    assert catalog.get_branch("sales", "gated-main").commit_id == before
    assert not (lake / "sales/gated-main/g.txt").exists()

    hook_server.switch_status = 200
    assert sh('echo gsrc > "$C"', C=str(control)).returncode == 0
    assert (lake / "sales/gated-main/g.txt").read_text() == "g"
